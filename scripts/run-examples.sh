#!/usr/bin/env bash
# The main job: set up and build, then compile every examples/*.flash, run it
# forward and backward on the CPU interpreter and print the errors of O,
# LSE, dQ, dK, dV (and aux gradients) against the naive fp64 reference.
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
  if ! "$BUILD_DIR/bin/flashc" "$example" --run=cpu --bwd --shape "$shape" "${extra[@]}"; then
    status=1
  fi
done
exit $status
