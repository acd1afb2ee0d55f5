#!/usr/bin/env bash
# Call U: the committed build (harness: cancelled gradients judged by their
# absolute error). The backward checks of D = 64 above N = 1024 (the new
# default tile), then the fuzzer's 300 cases through the backward on the
# 128 x 128 tile and on the default tile.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export FLASHC_CACHE_DIR=$T/cache
echo "== gpu-backward-check (D = 64 above N = 1024)"
FLASH_RUN=$T/flash-run ONLY='N=1500|N=1300|N=2049' timeout 200 bash scripts/gpu-backward-check.sh > $OUT/bwd-check.log 2>&1; tail -1 $OUT/bwd-check.log; grep -A8 '^FAIL' $OUT/bwd-check.log | head -30
for d in fuzz fuzz2; do
  echo "== gpu-fuzz $d ($(head -1 .device-carry/$d/cases.txt | grep -o -- '--bwd.*'))"
  FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=150 timeout 150 bash scripts/gpu-fuzz.sh .device-carry/$d > $OUT/gpu-$d.log 2>&1; tail -1 $OUT/gpu-$d.log; grep -A8 '^FAIL' $OUT/gpu-$d.log | head -20
done
