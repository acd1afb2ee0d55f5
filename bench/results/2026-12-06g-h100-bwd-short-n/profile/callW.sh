#!/usr/bin/env bash
# Call W: where the backward's time goes at short N: per-kernel durations
# (ncu gpu__time_duration) of flashc's preprocess, main and convert kernels
# and of SDPA cuDNN's backward kernels, beside end-to-end CUDA-event times.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export FLASHC_CACHE_DIR=$T/cache
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
echo "== e2e"
for s in "128 full 1024" "128 causal 1024" "128 full 4096" "128 full 16384" "64 full 4096" "64 full 1024"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D))
  r=$(timeout 90 $T/flash-run examples/$ex.flash --bwd --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$OUT/last.log | tail -1)
  echo "$r" | tee -a $OUT/time.csv | awk -F, '{printf "%-7s D=%s N=%-5s %s ms %s TF\n", $1, $8, $6, $11, $12}'
done
echo "== ncu flashc"
for s in "128 full 1024" "128 causal 1024" "128 full 4096" "128 full 16384" "64 full 4096" "64 full 1024"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D))
  timeout 120 $ncu --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --kernel-name regex:'_bwd' $T/flash-run examples/$ex.flash --bwd --shape B=$B,H=$H,N=$N,D=$D --iters 1 --warmup 0 > $OUT/ncu-$D-$ex-$N.csv 2>&1
  echo "-- D=$D $ex N=$N (last launches)"; grep gpu__time_duration $OUT/ncu-$D-$ex-$N.csv | awk -F'","' '{print $5, $(NF)}' | tail -4
done
echo "== ncu cudnn"
for s in "128 0 1024" "128 1 1024" "128 0 4096" "128 0 16384" "64 0 4096"; do
  set -- $s; D=$1; c=$2; N=$3; B=$((16384 / N)); H=$((2048 / D))
  timeout 150 $ncu --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --nvtx --nvtx-include "bwd2/" python3 .device-carry/cudnn_bwd_once.py cudnn $B $H $N $D $c > $OUT/ncu-cudnn-$D-$c-$N.csv 2>&1
  echo "-- cudnn D=$D causal=$c N=$N"; grep -E 'gpu__time_duration|launch__grid_size|registers' $OUT/ncu-cudnn-$D-$c-$N.csv | awk -F'","' '{print $5, $(NF-2), $(NF)}' | cut -c1-150 | tail -12
done
echo "== peers"
python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash 2>&1 | tee $OUT/peers.csv | grep -v '^peer'
python3 .device-carry/peers.py --bwd --hdims 64 --seqs 1024,4096 --peers sdpa-cudnn,sdpa-flash 2>&1 | grep -v '^peer' | tee -a $OUT/peers.csv
