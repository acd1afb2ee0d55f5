#!/usr/bin/env bash
# Issue 5's bar on a GPU host: flashc-tune on D = 128, N = 4096, causal and
# non-causal, with the default space and a 60 s budget; then flash-run times
# the default and the tuned configuration back to back. Writes the ranked
# tables and a summary to OUTDIR (default bench/results/tune).
#
#   FLASH_RUN=path/to/flash-run FLASHC_TUNE=path/to/flashc-tune bench/tune.sh [OUTDIR]
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
FLASHC_TUNE=${FLASHC_TUNE:-flashc-tune}
OUT=${1:-bench/results/tune}
SHAPE=${SHAPE:-B=4,H=16,N=4096,D=128}
BUDGET=${BUDGET:-60s}
mkdir -p "$OUT"
export FLASHC_CACHE_DIR=$OUT/cache  # the tuning cache flash-run reads too
summary=$OUT/tune-summary.md
{
  echo "# flashc-tune at $SHAPE ($(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  echo
  echo "| causal | tuner wall s | winner | default TFLOP/s | tuned TFLOP/s | tuned/default |"
  echo "|---|---|---|---|---|---|"
} > "$summary"
for causal in 0 1; do
  if [ $causal -eq 1 ]; then file=examples/causal.flash; flag=--causal; name=causal; else file=examples/full.flash; flag=; name=full; fi
  echo "[tune] $name $SHAPE" >&2
  start=$(date +%s)
  "$FLASHC_TUNE" "$file" --shape "$SHAPE" $flag --budget "$BUDGET" > "$OUT/tune-$name.txt" 2> "$OUT/tune-$name.log"
  rc=$?
  wall=$(( $(date +%s) - start ))
  if [ $rc -eq 3 ]; then echo "no GPU: nothing timed (see $OUT/tune-$name.txt)" >&2; exit 3; fi
  winner=$(sed -n 's/^winner: \(.*\), [0-9.]* TFLOP\/s.*/\1/p' "$OUT/tune-$name.txt")
  # The same run: default and tuned, back to back.
  default=$("$FLASH_RUN" "$file" --shape "$SHAPE" $flag --no-tuning-cache --csv --iters 30 2>&1 | tail -1 | cut -d, -f11)
  tuned=$("$FLASH_RUN" "$file" --shape "$SHAPE" $flag --csv --iters 30 2>&1 | tail -1 | cut -d, -f11)
  ratio=$(awk -v a="$tuned" -v b="$default" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "-" }')
  echo "| $causal | $wall (rc $rc) | ${winner:-none} | $default | $tuned | $ratio |" >> "$summary"
done
cat "$summary"
