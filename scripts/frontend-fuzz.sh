#!/usr/bin/env bash
# Builds the front end's libFuzzer target with clang (ASan + UBSan) in
# build-fuzz/ and runs it for SECONDS (default 60) from a seed corpus of
# examples/ and test/Frontend. New inputs it finds stay in build-fuzz/corpus;
# a crash leaves crash-* (the input) in build-fuzz/ and exits non-zero.
#   scripts/frontend-fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
CLANGXX=${CLANGXX:-$(command -v clang++-22 || command -v clang++ || true)}
CLANG=${CLANG:-$(command -v clang-22 || command -v clang || true)}
if [ -z "$CLANGXX" ] || [ -z "$CLANG" ]; then
  echo "frontend-fuzz: no clang found (apt-get install clang-22 libclang-rt-22-dev)" >&2
  exit 3
fi
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="$CLANGXX" -DFLASHC_LIBFUZZER=ON \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
ninja -C build-fuzz -j"${JOBS:-2}" flashc-frontend-fuzzer
mkdir -p build-fuzz/corpus build-fuzz/seeds
cp examples/*.flash build-fuzz/seeds/
find test/Frontend test/GPU -name '*.flash' -exec cp {} build-fuzz/seeds/ \;
# libMLIR and libLLVM are not instrumented: their containers would trip
# ASan's container-overflow annotations, and LLVM's allocator headers poison
# memory (__asan_poison_memory_region) in our instrumented copies of their
# inline code that the library's own copies then write without unpoisoning
# (a use-after-poison report on a StorageUniquer slab). Both are off;
# everything else is checked.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_container_overflow=0:allow_user_poisoning=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd build-fuzz
./bin/flashc-frontend-fuzzer corpus seeds -max_total_time="$seconds" -max_len=4096 \
  -timeout=20 -print_final_stats=1 2>&1 | tail -25
