#!/usr/bin/env bash
# Call N (issue 14) on the H200: HEAD's backward over the issue's grid
# beside SDPA's cuDNN and FA2 backward (bench/backward.sh, each row
# validated first); the D = 64 unmasked tile at N = 1024 / 2048 (default one
# warpgroup vs 128 x 128 with the writer in any order, two rounds); D = 256
# beside the peers; SASS of the main kernels. Tables last.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== SASS"
for p in .device-carry/ptxA/*.ptx; do n=$(basename $p .ptx)
  /usr/local/cuda/bin/ptxas -arch=sm_90a $p -o $T/$n.cubin || continue
  main=$(grep -o '\.entry [a-z_0-9]*_bwd(' $p | head -1 | sed 's/.entry //; s/(//')
  /usr/local/cuda/bin/cuobjdump --dump-sass --function $main $T/$n.cubin > $T/$n.sass 2>&1
  echo "$n $main HGMMA=$(grep -c HGMMA $T/$n.sass) STL=$(grep -c STL $T/$n.sass) LDL=$(grep -c LDL $T/$n.sass)"
done | tee $OUT/sass.txt
echo "== D = 64 unmasked tile: default | 128x128 (writer, any order), ms, two rounds"
for N in 1024 2048; do B=$((16384 / N)); line="D=64 full N=$N"
  for round in 1 2; do for tile in "" "--bwd-tile Br=128,Bc=128"; do
    r=$(FLASHC_CACHE_DIR=$T/cache-t${tile:+w} timeout 60 $T/flash-run examples/full.flash --bwd $tile --csv --shape B=$B,H=32,N=$N,D=64 --iters 30 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }
    echo "$N,${tile:-default},$round,$ms" >> $OUT/tile.csv; line="$line | $ms"
  done; done; echo "$line"
done
echo "== D = 128 short N, how dQ is added: default (key-block order) | --dq-writer (any order) | --dq-writer=false (body, any order), ms, two rounds"
for s in "full 512" "causal 512" "full 1024"; do set -- $s; ex=$1; N=$2; B=$((16384 / N)); line="D=128 $ex N=$N"
  for round in 1 2; do for mode in "" --dq-writer --dq-writer=false; do
    r=$(FLASHC_CACHE_DIR=$T/cache-o${mode:+$(echo $mode | tr -dc a-z)} timeout 60 $T/flash-run examples/$ex.flash --bwd $mode --csv --shape B=$B,H=16,N=$N,D=128 --iters 30 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }
    echo "$ex,$N,${mode:-default},$round,$ms" >> $OUT/order.csv; line="$line | $ms"
  done; done; echo "$line"
done
echo "== grid"
FLASH_RUN=$T/flash-run PEERS=.device-carry/peers.py HDIMS=64,128 SEQS=512,1024,2048,4096,8192,16384 \
  timeout 400 bash bench/backward.sh $OUT/grid > $OUT/grid.log 2>&1; echo "grid exit $?"
echo "== D = 256 (N = 1024 / 4096, H = 8)"
for N in 1024 4096; do for ex in full causal; do c=; [ $ex = causal ] && c=--causal
  timeout 60 $T/flash-run examples/$ex.flash --bwd --csv --shape B=$((16384 / N)),H=8,N=$N,D=256 $c --iters 20 2>>$OUT/d256.log | tail -1; done; done | tee $OUT/d256.csv
timeout 90 python3 .device-carry/peers.py --bwd --hdims 256 --seqs 1024,4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/d256.log | grep ',bwd,' | tee -a $OUT/d256.csv
echo "== grid table"; cat $OUT/grid/table.md
