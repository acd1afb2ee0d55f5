#!/usr/bin/env bash
# One device call for varlen batches (issue 16): scripts/gpu-check.sh's
# varlen section against the interpreter, compute-sanitizer (SAN_TOOLS,
# default memcheck racecheck synccheck; both GEMMs) over a varlen prefill
# and a chunked prefill over a paged cache at a small shape, then
# bench/varlen.sh (BENCH_ARGS). Needs .device-carry/flashc-tools.tar.xz.
# Results as they come: $OUT/checks.txt, $OUT/sanitizer.txt, $OUT/bench/.
# SKIP_CHECKS, SKIP_SANITIZER, SKIP_BENCH leave parts out.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"
if [ -z "${SKIP_CHECKS:-}" ]; then
  echo "== checks" >&2
  SECTIONS=${CHECK_SECTIONS:-varlen} FLASH_RUN="$T/flash-run" scripts/gpu-check.sh > "$OUT/checks.txt" 2>&1
  grep -E "^FAIL" "$OUT/checks.txt" >&2
  tail -1 "$OUT/checks.txt" >&2
fi
if [ -z "${SKIP_SANITIZER:-}" ]; then
  echo "== compute-sanitizer" >&2
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # The one-warpgroup kernel (N <= 512), the warp-specialized one with TMA
  # (Br = 128) on the persistent grid and with one CTA per tile, and packed
  # chunks over a paged cache.
  SAN_CASES=${SAN_CASES:-"examples/varlen.flash --shape B=4,H=4,HKV=2,N=300,D=128
examples/varlen.flash --shape B=4,H=4,HKV=2,N=700,D=128 --tile Br=128,Bc=128
examples/varlen.flash --shape B=4,H=4,HKV=2,N=700,D=128 --tile Br=128,Bc=128 --persistent=false
test/Driver/Inputs/chunked-prefill.flash --shape B=4,H=4,HKV=2,N=100,M=600,D=128"}
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    for gemm in ${SAN_GEMMS:-auto mma.sync}; do
      while read -r case; do
        echo "-- $tool $gemm $case" >> "$OUT/sanitizer.txt"
        timeout 240 "$SAN" --tool "$tool" --error-exitcode 9 "$T/flash-run" $case --gemm "$gemm" \
          --iters 0 >> "$OUT/sanitizer.txt" 2>&1
        echo "exit $?" >> "$OUT/sanitizer.txt"
      done <<< "$SAN_CASES"
    done
  done
  grep -E "^-- |^exit|ERROR SUMMARY" "$OUT/sanitizer.txt" >&2
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  echo "== bench" >&2
  mkdir -p "$OUT/bench"
  eval "set -- ${BENCH_ARGS:-}"
  OUT="$OUT/bench" bench/varlen.sh "$@" 2> "$OUT/bench/bench.log"
fi
