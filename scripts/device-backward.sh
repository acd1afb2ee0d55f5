#!/usr/bin/env bash
# One device call for the backward: the portable tools from $TOOLS, the
# backward check of every example (scripts/gpu-backward-check.sh),
# compute-sanitizer (memcheck, racecheck, synccheck) over the three
# backward kernels at a small shape, and bench/backward.sh (flashc beside
# the peers). Logs and tables go to $OUT; a summary is printed last.
#   TOOLS=.device-carry/flashc-tools.tar.xz OUT=out scripts/device-backward.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
tools=$(mktemp -d)
tar -C "$tools" -xJf "${TOOLS:-.device-carry/flashc-tools.tar.xz}" || exit 2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
export FLASHC_CACHE_DIR=$(mktemp -d)
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  FLASH_RUN=$tools/flash-run scripts/gpu-backward-check.sh > "$OUT/gpu-backward-check.log" 2>&1
fi
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    for f in examples/causal.flash examples/relative_bias.flash; do
      echo "== $tool $f" >> "$OUT/sanitizer.log"
      timeout 300 "$sanitizer" --tool $tool "$tools/flash-run" "$f" --bwd \
        --shape B=1,H=2,N=200,D=64 --iters 0 >> "$OUT/sanitizer.log" 2>&1
      echo "exit $?" >> "$OUT/sanitizer.log"
    done
  done
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  FLASH_RUN=$tools/flash-run bench/backward.sh "$OUT/bench" > "$OUT/bench.log" 2>&1
fi
echo "== $(cat "$OUT/gpu.txt")"
[ -f "$OUT/gpu-backward-check.log" ] && { grep -E "^FAIL" -A8 "$OUT/gpu-backward-check.log" | head -60; tail -1 "$OUT/gpu-backward-check.log"; }
[ -f "$OUT/sanitizer.log" ] && grep -E "^==|ERROR SUMMARY|exit|Error" "$OUT/sanitizer.log" | head -40
[ -f "$OUT/bench/table.md" ] && cat "$OUT/bench/table.md"
true
