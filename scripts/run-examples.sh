#!/usr/bin/env bash
# The main job: set up and build, then compile every examples/*.flash, run it
# forward and backward on the CPU interpreter and print the errors of O,
# LSE, dQ, dK, dV (and aux gradients) against the naive fp64 reference
# (a paged K/V cache and a varlen batch, which only the forward reads:
# forward only; a varlen batch with five sequences of ragged lengths: full,
# 1, 0, random); then the GQA examples as decode steps (split keys, packed
# heads), the paged ones with ragged sequence lengths (M, 1, 0, random)
# over shuffled pages.
# Exits non-zero if any example fails its bound.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh
shape=${SHAPE:-B=2,H=4,N=1000,D=64}
status=0
for example in examples/*.flash; do
  echo "== $example (--shape $shape)"
  extra=()
  # GQA runs with 4 query heads per key/value head.
  [[ $example == *gqa.flash ]] && extra=(--shape "$shape,HKV=1")
  backward=(--bwd)
  grep -q '^ *paged ' "$example" && backward=()
  if grep -q '^ *varlen ' "$example"; then
    backward=()
    extra=(--shape "B=5,${shape#B=*,}")
  fi
  if ! "$BUILD_DIR/bin/flashc" "$example" --run=cpu "${backward[@]}" --shape "$shape" "${extra[@]}"; then
    status=1
  fi
done
# Decode steps, one query token and four (speculative decoding), for the
# variants whose keys have their own heads: the keys split over 4 CTAs'
# worth of ranges merged by LSE, the query heads of a KV group packed into
# one tile (the decode default), on the interpreter.
decode_shape=${DECODE_SHAPE:-B=2,H=8,HKV=2,M=4096,D=64}
for example in examples/*.flash; do
  grep -q 'k: [a-z0-9]*\[B, HKV' "$example" || continue
  # A varlen example packs prompts (its N and M are one symbol): prefill only.
  grep -q '^ *varlen ' "$example" && continue
  # A paged cache: five sequences, so every kind of length is there.
  batch=
  grep -q '^ *paged ' "$example" && batch=,B=5
  for n in 1 4; do
    echo "== $example decode (--shape $decode_shape,N=$n$batch --splits 4)"
    if ! "$BUILD_DIR/bin/flashc" "$example" --run=cpu --shape "$decode_shape,N=$n$batch" \
        --splits 4; then
      status=1
    fi
  done
done
exit $status
