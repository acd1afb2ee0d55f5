#!/usr/bin/env bash
# Call X: (1) the coalesced preprocess (new) vs base: checks, ncu durations,
# end-to-end; (2) the backward's fill at short N: key-block order (default)
# vs adds in any order vs each key block's walk rotated, N = 1024..4096.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
mkdir $T/base; tar -C "$T/base" -xJf .device-carry/base-run.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export FLASHC_CACHE_DIR=$T/cache
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
echo "== checks (new)"
while read -r ex shape flags; do
  out=$(timeout 90 $T/flash-run examples/$ex.flash --bwd $flags --shape $shape --iters 0 2>&1) && echo "ok   $ex $shape $flags" || { echo "FAIL $ex $shape $flags"; echo "$out" | tail -3; }
done > $OUT/checks.log <<'ROWS'
full B=2,H=2,N=1100,D=128
causal B=2,H=2,N=1100,D=64
full B=1,H=2,N=1,D=128
full B=1,H=2,N=77,D=96
causal B=1,H=2,N=300,D=256
alibi B=2,H=4,N=700,D=128 --layout=bshd
document B=1,H=2,N=2000,D=64
gqa B=1,H=8,HKV=2,N=513,D=128
full B=1,H=2,N=1000,D=128 --gemm=mma.sync
full B=1,H=2,N=1000,D=128 --deterministic
full B=2,H=2,N=1100,D=128 --bwd-rotate-tiles
full B=2,H=2,N=1100,D=128 --bwd-rotate-tiles --dq-writer
ROWS
echo "checks: ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A3 '^FAIL' $OUT/checks.log | head -20
echo "== ncu preprocess (base, new)"
for D in 128 64; do H=$((2048 / D)); for v in base new; do
  bin=$T/flash-run; [ $v = base ] && bin=$T/base/flash-run
  timeout 90 $ncu --metrics gpu__time_duration.sum --csv --kernel-name regex:'_bwd_preprocess' $bin examples/full.flash --bwd --shape B=16,H=$H,N=1024,D=$D --iters 1 --warmup 0 > $OUT/ncu-pre-$v-$D.csv 2>&1
  echo "D=$D $v preprocess ns: $(grep gpu__time_duration $OUT/ncu-pre-$v-$D.csv | awk -F'","' '{print $(NF)}' | tail -1)"
done; done
echo "== timing: base | new | new dq-writer=false | new rotate | new rotate+writer (ms)"
for D in 128 64; do H=$((2048 / D)); for ex in full causal; do for N in 1024 2048 4096; do B=$((16384 / N))
  line="D=$D $ex N=$N"
  for f in "base" "" "--dq-writer=false" "--bwd-rotate-tiles" "--bwd-rotate-tiles --dq-writer"; do
    bin=$T/flash-run; ff=$f; [ "$f" = base ] && { bin=$T/base/flash-run; ff=""; }
    r=$(timeout 60 $bin examples/$ex.flash --bwd $ff --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$OUT/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || ms=FAIL
    echo "$D,$ex,$N,${f:-new},$ms" >> $OUT/time.csv
    line="$line | $ms"
  done; echo "$line"
done; done; done
echo "== peers"
python3 .device-carry/peers.py --bwd --hdims 128,64 --seqs 1024,2048,4096 --peers sdpa-cudnn 2>&1 | grep ',bwd,' | tee $OUT/peers.csv
