#!/usr/bin/env bash
# Call B2 (deferred turn pass): deterministic backward with turn-major launch and awaited turns
# found from the mask's facts (skipped tiles cost nothing): GPU checks,
# compute-sanitizer, and timing beside the default mode and the previous
# deterministic kernel (prev = 6511c57) in the same run.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
P=$(mktemp -d); tar -C "$P" -xJf .device-carry/prev.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(timeout 200 $T/flash-run $1 --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $1"; echo "$out" | grep -E "determin|bitwise|\(backward" | head -3 | sed 's/^/      /'
  else echo "FAIL  $1 (exit $rc)"; echo "$out" | tail -15 | sed 's/^/      /'; fi
}
export -f one; export T
{
for D in 64 128; do
  for f in causal full sliding_window alibi document relative_bias prefix_lm softcap; do echo "examples/$f.flash --shape B=2,H=4,N=1000,D=$D --deterministic"; done
  echo "examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=$D --deterministic"
  echo "examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=$D --param window=300 --deterministic"
  echo "examples/key_padding.flash --shape B=2,H=4,N=1000,D=$D --deterministic"
  echo "examples/causal.flash --shape B=1,H=2,N=5000,D=$D --deterministic"
  echo "examples/document.flash --shape B=1,H=4,N=3000,D=$D --bwd-block-summary=false --deterministic"
  echo "examples/causal.flash --shape B=2,H=4,N=1000,D=$D"
done
for fl in --deterministic; do
echo "examples/causal.flash --shape B=1,H=2,N=777,D=256 $fl"
echo "examples/full.flash --shape B=1,H=2,N=333,D=96 $fl"
echo "examples/full.flash --shape B=2,H=8,HKV=1,N=515,M=700,D=128 $fl"
echo "examples/causal.flash --shape B=1,H=1,N=17,D=128 $fl"
echo "examples/causal.flash --shape B=2,H=4,N=1000,D=128 --layout bshd $fl"
echo "examples/causal.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync $fl"
echo "examples/sliding_window.flash --shape B=2,H=4,N=2000,D=64 --gemm=mma.sync $fl"
echo "examples/causal.flash --shape B=1,H=2,N=700,D=64 --tile Br=64,Bc=64 $fl"
echo "examples/full.flash --shape B=1,H=2,N=700,M=650,D=64 --tile Br=64,Bc=192 $fl"
echo "test/GPU/past-rows.flash --shape B=1,H=2,N=1000,D=128 $fl"
echo "examples/document.flash --shape B=1,H=4,N=3000,D=128 --bwd-block-summary $fl"
done
} > $T/cases.txt
echo "== checks ($(wc -l < $T/cases.txt) cases)"
xargs -d '\n' -P 8 -I{} bash -c 'one "$1"' _ {} < $T/cases.txt > $OUT/det-checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/det-checks.log), FAIL $(grep -c '^FAIL' $OUT/det-checks.log)"; grep -A15 "^FAIL" $OUT/det-checks.log | head -60
echo "== sanitizer"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do for run in "examples/causal.flash --shape B=1,H=2,N=300,D=128 --deterministic" "examples/document.flash --shape B=1,H=2,N=600,D=128 --deterministic"; do
  r=$(timeout 60 $san --tool $tool $T/flash-run $run --bwd --iters 0 2>&1 | tail -2 | tr '\n' ' ')
  echo "$tool $run: $r" | tee -a $OUT/sanitizer.log | cut -c1-220
done; done
echo "== timing"
echo "mode,variant,dtype,B,H,HKV,N,M,D,layout,dir,ms,tflops,rel_dq,rel_dk,rel_dv" > $OUT/det-time.csv
for D in 64 128; do H=$((2048 / D)); for N in 4096 16384; do B=$((16384 / N)); for f in causal full; do
  modes="default det prev-det"
  for m in $modes; do
    run=$T/flash-run; flag=; case $m in *det) flag=--deterministic;; esac; case $m in prev*) run=$P/flash-run;; esac
    fl=; [ $f = causal ] && fl=--causal
    row=$(timeout 40 $run examples/$f.flash --bwd $flag $fl --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>/dev/null | tail -1)
    echo "$m,$row" >> $OUT/det-time.csv
  done
done; done; done
awk -F, 'NR>1 {printf "%-12s %-7s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}' $OUT/det-time.csv
