#!/usr/bin/env bash
# Call G: first GPU run of --defer-turns and --dq-writer (49ca9b8):
# correctness vs the interpreter (parallel), compute-sanitizer, then the
# five modes timed in one run (bench/deterministic.sh).
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== checks"
( FLASH_RUN=$T/flash-run ONLY='defer-turns' CASE_TIMEOUT=100 scripts/gpu-backward-check.sh > $OUT/check-defer.log 2>&1 ) &
( FLASH_RUN=$T/flash-run ONLY='dq-writer.*deterministic' CASE_TIMEOUT=100 scripts/gpu-backward-check.sh > $OUT/check-detwriter.log 2>&1 ) &
( FLASH_RUN=$T/flash-run ONLY='dq-writer$' CASE_TIMEOUT=100 scripts/gpu-backward-check.sh > $OUT/check-writer.log 2>&1 ) &
wait
for f in defer detwriter writer; do echo "$f: $(tail -1 $OUT/check-$f.log)"; grep -A12 "^FAIL" $OUT/check-$f.log | head -40; done
echo "== sanitizer"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do for run in \
  "examples/causal.flash --shape B=1,H=2,N=300,D=128 --dq-writer" \
  "examples/causal.flash --shape B=1,H=2,N=300,D=128 --dq-writer --deterministic" \
  "examples/sink_window.flash --shape B=1,H=2,N=700,D=64 --param window=100 --deterministic --defer-turns" \
  "examples/full.flash --shape B=1,H=2,N=260,D=128 --deterministic --defer-turns"; do
  r=$(timeout 60 $san --tool $tool $T/flash-run $run --bwd --iters 0 2>&1 | tail -2 | tr '\n' ' ')
  echo "$tool $run: $r" | tee -a $OUT/sanitizer.log | cut -c1-240
done; done
echo "== timing"
MODES="default det det-defer writer det-writer" FLASH_RUN=$T/flash-run timeout 330 bench/deterministic.sh $OUT/modes > $OUT/modes.log 2>&1
cat $OUT/modes/table.txt
