#!/usr/bin/env bash
# One device call for decode (issue 16): the split-key kernels against the
# interpreter (scripts/gpu-check.sh's split-keys section), compute-sanitizer
# (memcheck, racecheck, synccheck) over a split launch and its combine
# kernel at a small shape, then bench/decode.sh beside SDPA. Needs
# .device-carry/flashc-tools.tar.xz and .device-carry/peers_infer.py.
# Results: $OUT/checks.txt, $OUT/sanitizer.txt, $OUT/table.md and
# $OUT/decode.tgz (every CSV and log). SKIP_CHECKS, SKIP_SANITIZER,
# SKIP_BENCH leave parts out; BENCH_ARGS are bench/decode.sh's arguments.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=$(mktemp -d)
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"

if [ -z "${SKIP_CHECKS:-}" ]; then
  echo "== checks" >&2
  SECTIONS=split-keys FLASH_RUN="$T/flash-run" scripts/gpu-check.sh > "$OUT/checks.txt" 2>&1
  tail -1 "$OUT/checks.txt" >&2
fi

if [ -z "${SKIP_SANITIZER:-}" ]; then
  echo "== compute-sanitizer" >&2
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    for gemm in auto mma.sync; do
      echo "-- $tool $gemm" >> "$OUT/sanitizer.txt"
      timeout 240 "$SAN" --tool "$tool" --error-exitcode 9 "$T/flash-run" examples/gqa.flash \
        --shape B=1,H=4,HKV=1,N=3,M=600,D=128 --splits 4 --gemm "$gemm" --iters 0 \
        >> "$OUT/sanitizer.txt" 2>&1
      echo "exit $?" >> "$OUT/sanitizer.txt"
    done
  done
  grep -E "^-- |^exit|ERROR SUMMARY" "$OUT/sanitizer.txt" >&2
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  echo "== bench" >&2
  # shellcheck disable=SC2086
  OUT="$W/bench" bench/decode.sh ${BENCH_ARGS:-} > "$OUT/table.md" 2> "$W/bench.log"
  cp "$W/bench.log" "$W/bench/" 2>/dev/null
  tar -C "$W" -czf "$OUT/decode.tgz" bench
fi
