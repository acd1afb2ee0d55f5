#!/usr/bin/env bash
# Call D: deterministic backward, key-block launch order, awaited turns from
# the mask's facts (skipped tiles cost nothing, documents walk), thread 0
# waits for its turn after staging dQ and passes it on itself. Checks,
# sanitizer, timing beside the default and prev-det (6511c57), same run.
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
  for f in causal full sliding_window document relative_bias prefix_lm; do echo "examples/$f.flash --shape B=2,H=4,N=1000,D=$D --deterministic"; done
  echo "examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=$D --deterministic"
  echo "examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=$D --param window=300 --deterministic"
  echo "examples/causal.flash --shape B=1,H=2,N=5000,D=$D --deterministic"
  echo "examples/document.flash --shape B=1,H=4,N=3000,D=$D --bwd-block-summary=false --deterministic"
done
echo "examples/causal.flash --shape B=1,H=2,N=777,D=256 --deterministic"
echo "examples/full.flash --shape B=1,H=2,N=333,D=96 --deterministic"
echo "examples/causal.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync --deterministic"
echo "examples/sliding_window.flash --shape B=2,H=4,N=2000,D=64 --gemm=mma.sync --deterministic"
echo "examples/document.flash --shape B=1,H=4,N=3000,D=128 --deterministic"
echo "examples/causal.flash --shape B=2,H=4,N=1000,D=128"
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
for DN in 64:16384 128:4096 128:16384; do D=${DN%:*}; N=${DN#*:}; H=$((2048 / D)); B=$((16384 / N)); for f in causal full sliding_window document; do
  [ $f = sliding_window -o $f = document ] && [ $DN != 128:16384 ] && continue
  for m in default det prev-det; do
    run=$T/flash-run; flag=; case $m in *det) flag=--deterministic;; esac; case $m in prev*) run=$P/flash-run;; esac
    fl=; [ $f = causal ] && fl=--causal; [ $f = sliding_window ] && fl="--param window=1024"
    row=$(timeout 40 $run examples/$f.flash --bwd $flag $fl --csv --shape B=$B,H=$H,N=$N,D=$D --iters 15 2>/dev/null | tail -1)
    echo "$m,$row" >> $OUT/det-time.csv
  done
done; done
awk -F, 'NR>1 {printf "%-9s %-15s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}' $OUT/det-time.csv
