#!/usr/bin/env bash
# The closing device call of a block-sparsity change: packed documents
# beside Flex (same call), then every example against the interpreter
# (scripts/gpu-check.sh), the fuzzer's cases (scripts/gpu-fuzz.sh over
# .device-carry/fuzz from `flashc-fuzz --emit-cases`) and the runtime's
# GPU tests. Expects .device-carry/flashc-tools.tar.xz and
# .device-carry/peers_masks.py (see bench/block-summary.sh).
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
echo "== flashc packed documents (B=1, H=16, 20 docs)"
for D in 64 128; do for N in 8192 16384 32768; do
  "$T/flash-run" examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 20 --csv 2>&1 | tail -1
done; done | tee "$OUT/flashc-docs-final.csv"
timeout 300 python3 .device-carry/peers_masks.py masks --masks document --N 8192,16384,32768 \
  --D 64,128 --H 16 --docs 20 2>&1 | grep -E "^peer|^flex" | tee "$OUT/peers-docs-final.csv"
echo "== gpu-check"
FLASH_RUN="$T/flash-run" scripts/gpu-check.sh > "$OUT/gpu-check.log" 2>&1
tail -1 "$OUT/gpu-check.log"; grep -A3 "^FAIL" "$OUT/gpu-check.log" | head -20
echo "== gpu-fuzz"
FLASH_RUN="$T/flash-run" JOBS=8 scripts/gpu-fuzz.sh .device-carry/fuzz > "$OUT/gpu-fuzz.log" 2>&1
tail -2 "$OUT/gpu-fuzz.log"; grep -A3 "^FAIL" "$OUT/gpu-fuzz.log" | head -20
echo "== flashrt-tests"
"$T/flashrt-tests" > "$OUT/flashrt-tests.log" 2>&1; tail -2 "$OUT/flashrt-tests.log"
