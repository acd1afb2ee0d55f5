#!/usr/bin/env bash
# Builds python-free-driver/examples/aot against this build tree's flashc
# CMake package: flashc --emit=aot writes the causal kernel (D = 128) and the
# varlen/dense pair of bench/inputs/varlen_pair.flash and the packed
# documents of examples/document.flash (D = 64), CMake finds
# flashc::flashrun, compiles the generated C++ sources, the C headers as C,
# and links aot-causal, aot-varlen and aot-documents. No GPU needed.
#   aot-example.sh FLASHC BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
flashc=$1 build=$2 src=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
"$flashc" "$src/examples/causal.flash" --emit=aot --shape D=128 -o "$work/gen"
# The varlen program's kernels (a packed batch checked against the dense
# kernel per sequence through the C entry points).
"$flashc" "$src/bench/inputs/varlen_pair.flash" --emit=aot --shape H=8,HKV=2,D=128 --ptxas=none \
  -o "$work/gen-varlen"
# The packed-documents program's kernels, forward and (deterministic)
# backward: a mask that reads aux tensors adds the cached block summary's
# entry points to both.
"$flashc" "$src/examples/document.flash" --bwd --deterministic --emit=aot --shape D=64 \
  --ptxas=none -o "$work/gen-doc"
for entry in flashc_document_launch_with_summary flashc_document_backward_with_summary; do
  grep -q "$entry" "$work/gen-doc/document.h" || { echo "document.h declares no $entry" >&2; exit 1; }
done
cc -fsyntax-only -x c "$work/gen-doc/document.h"
for file in causal.h causal.cpp causal.ptx; do
  [ -s "$work/gen/$file" ] || { echo "flashc --emit=aot wrote no $file" >&2; exit 1; }
done
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src/python-free-driver/examples/aot" -B "$work/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -Dflashc_DIR="$build/lib/cmake/flashc" \
  -DFLASHC_AOT_DIR="$work/gen" -DFLASHC_VARLEN_AOT_DIR="$work/gen-varlen" \
  -DFLASHC_DOCUMENT_AOT_DIR="$work/gen-doc" \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build"
for program in aot-varlen aot-documents; do
  [ -x "$work/build/$program" ] || { echo "$program was not built" >&2; exit 1; }
done
echo "built $work/build/aot-causal, aot-varlen and aot-documents"

