#!/usr/bin/env bash
# One call on a GPU host with the portable tools (cmake -DFLASHC_PORTABLE=ON;
# an archive of flashc, flash-run, flashc-tune and flashrt-tests): libflashrt's
# GPU tests, scripts/gpu-check.sh (every example, GPU vs interpreter),
# scripts/gpu-fuzz.sh over the fuzzer's cases, and one timed flash-run with
# its configuration lines. Logs go to $OUT; a short summary is printed last.
#   TOOLS=.device-carry/flashc-tools.tar.xz CASES=.device-carry/gpu-fuzz OUT=out \
#     scripts/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
tools=$(mktemp -d)
tar -C "$tools" -xJf "${TOOLS:-.device-carry/flashc-tools.tar.xz}" || exit 2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
git rev-parse --short HEAD > "$OUT/commit.txt" 2>/dev/null || true
"$tools/flashrt-tests" > "$OUT/flashrt-gpu-tests.log" 2>&1
FLASH_RUN=$tools/flash-run scripts/gpu-check.sh > "$OUT/gpu-check.log" 2>&1
FLASH_RUN=$tools/flash-run JOBS=${JOBS:-12} scripts/gpu-fuzz.sh "${CASES:-.device-carry/gpu-fuzz}" \
  > "$OUT/gpu-fuzz.log" 2>&1
"$tools/flash-run" examples/causal.flash --shape B=4,H=16,N=4096,D=128 --causal --iters 20 \
  > "$OUT/flash-run-causal.txt" 2>&1
echo "== $(cat "$OUT/gpu.txt") at $(cat "$OUT/commit.txt" 2>/dev/null)"
tail -3 "$OUT/flashrt-gpu-tests.log"
grep -E "FAIL" "$OUT/gpu-check.log" | head -20
tail -1 "$OUT/gpu-check.log"
grep -E "^FAIL" -A6 "$OUT/gpu-fuzz.log" | head -40
tail -1 "$OUT/gpu-fuzz.log"
cat "$OUT/flash-run-causal.txt"
