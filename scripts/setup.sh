#!/usr/bin/env bash
# Installs what flashc needs to build and test on Debian 12 (bookworm), then
# configures and builds it in build/. Safe to run again: installs only what
# is missing and rebuilds incrementally.
#   scripts/setup.sh            # Release build in ./build
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

# clang-22 and its compiler-rt: the front end's libFuzzer target
# (scripts/frontend-fuzz.sh, run by scripts/test.sh).
packages=(cmake ninja-build g++ ccache libgtest-dev libzstd-dev
          llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
          clang-22 libclang-rt-22-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
# Two cores and 24 GiB: two compile jobs at most.
ninja -C "$BUILD_DIR" -j"${JOBS:-2}"
