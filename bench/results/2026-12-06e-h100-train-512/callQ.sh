#!/usr/bin/env bash
# Call Q: the training-step pair (forward, then backward from its O and
# LSE) beside SDPA's pairs at D = 128, and the backward at N = 512, with
# the ordered default (3bcfedd).
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export FLASHC_CACHE_DIR=$T/cache
FLASH_RUN=$T/flash-run PASS=train HDIMS=128 SEQS=4096,16384 ITERS=12 timeout 150 bash bench/backward.sh $OUT/train 2>/dev/null | tail -8
FLASH_RUN=$T/flash-run PASS=bwd HDIMS=128,64 SEQS=512 ITERS=20 timeout 90 bash bench/backward.sh $OUT/bwd512 2>/dev/null | tail -8
