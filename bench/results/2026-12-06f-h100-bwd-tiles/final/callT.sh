#!/usr/bin/env bash
# Call T: the final D = 64 default (threshold N <= 1024, 2048 unmasked).
# 1. the differential fuzzer's 300 cases through the backward on the
#    128 x 128 tile (dQ in key-block order where the mask allows);
# 2. deterministic mode vs the default on a window and packed documents
#    (D = 64 and 128, N = 16384);
# 3. the training-step pair at D = 64 beside SDPA's pairs.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== gpu-fuzz (backward, Br=128 Bc=128)"
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=150 timeout 200 bash scripts/gpu-fuzz.sh .device-carry/fuzz > $OUT/gpu-fuzz.log 2>&1; tail -1 $OUT/gpu-fuzz.log; grep -A8 '^FAIL' $OUT/gpu-fuzz.log | head -30
echo "== deterministic vs default"
row() { local mode=$1 ex=$2 D=$3 N=$4; shift 4; local H=$((2048 / D)) B=$((16384 / N))
  r=$(FLASHC_CACHE_DIR=$T/cache timeout 90 $T/flash-run examples/$ex.flash --bwd "$@" --csv --shape B=$B,H=$H,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || { r="$ex,FAILED"; tail -3 $OUT/last.log; }
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-6s %-14s D=%s N=%-5s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
for D in 64 128; do
  row def sliding_window $D 16384; row det sliding_window $D 16384 --deterministic
  row def document $D 16384 --docs 20 --seed 7; row det document $D 16384 --docs 20 --seed 7 --deterministic
done
echo "== training pair D = 64"
FLASH_RUN=$T/flash-run PASS=train HDIMS=64 SEQS=4096,16384 ITERS=12 FLASHC_CACHE_DIR=$T/cache timeout 200 bash bench/backward.sh $OUT/train 2>/dev/null | tail -8
