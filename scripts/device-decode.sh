#!/usr/bin/env bash
# One device call for decode (issue 16): the split-key and packed-GQA
# kernels against the interpreter (scripts/gpu-check.sh's sections
# CHECK_SECTIONS, default split-keys,packed,paged), compute-sanitizer
# (SAN_TOOLS, default memcheck racecheck synccheck; SAN_GEMMS, default auto
# mma.sync) over SAN_CASES at a small shape (a packed split launch and its
# combine kernel, dense and over a paged cache), then
# bench/decode.sh beside SDPA. Needs .device-carry/flashc-tools.tar.xz and
# .device-carry/peers_infer.py. Results, written as they come (a call cut
# short keeps what is done): $OUT/checks.txt, $OUT/sanitizer.txt and
# $OUT/bench/ (table.md, every CSV and log). SKIP_CHECKS, SKIP_SANITIZER,
# SKIP_BENCH leave parts out; BENCH_ARGS are bench/decode.sh's arguments
# (quote lists: BENCH_ARGS='"1 8" "2048"').
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"

if [ -z "${SKIP_CHECKS:-}" ]; then
  echo "== checks" >&2
  SECTIONS=${CHECK_SECTIONS:-split-keys,packed,paged} FLASH_RUN="$T/flash-run" scripts/gpu-check.sh \
    > "$OUT/checks.txt" 2>&1
  tail -1 "$OUT/checks.txt" >&2
fi

if [ -z "${SKIP_SANITIZER:-}" ]; then
  echo "== compute-sanitizer" >&2
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # A packed split launch and its combine kernel; the same over a paged
  # cache (pages below the key block: TMA boxes per page; above: per
  # block; either way the last block gathered), and a prefill over pages
  # (two warpgroups, P·V deferred). One flash-run argument list per line.
  split="--shape B=4,H=8,HKV=2,N=3,M=600,D=128 --splits 4"
  SAN_CASES=${SAN_CASES:-"examples/gqa.flash $split
test/Driver/Inputs/paged-no-page.flash --paged 16 $split
test/Driver/Inputs/paged-no-page.flash --paged 128 $split
test/Driver/Inputs/paged-no-page.flash --paged 64 --shape B=3,H=4,HKV=2,N=300,M=700,D=128"}
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    for gemm in ${SAN_GEMMS:-auto mma.sync}; do
      while read -r case; do
        echo "-- $tool $gemm $case" >> "$OUT/sanitizer.txt"
        timeout 240 "$SAN" --tool "$tool" --error-exitcode 9 "$T/flash-run" $case \
          --gemm "$gemm" --iters 0 >> "$OUT/sanitizer.txt" 2>&1
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
  OUT="$OUT/bench" bench/decode.sh "$@" > /dev/null 2> "$OUT/bench/bench.log"
fi
