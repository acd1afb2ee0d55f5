#!/usr/bin/env bash
# Call Q (issue 16), HEAD's portable flash-run: the decode, packed and
# paged sections of gpu-check against the interpreter, then decode beside
# SDPA's flash and cuDNN backends (the whole grid: GQA 32/8, 64/8, MHA;
# B 1-128; M 2k-128k) with the copy rate of the same run, then paged
# (pages 16 and 64 by TMA, 16 gathered by cp.async) beside dense in three
# alternating rounds at B = 1 and once at B = 8 / 32. Tables last.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
OUT=$OUT/decode SKIP_SANITIZER=1 CHECK_SECTIONS=split-keys,packed,paged \
  PAGED="1/32/8/8192 8/32/8/8192 32/32/8/8192 1/32/8/32768" PAGES="16 64" PAGES_GATHERED=16 \
  timeout 400 bash scripts/device-decode.sh
echo "decode exit $?"
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
echo "== B = 1 paged rounds (GB/s): dense tma, page 16 tma, page 16 cp.async, page 64 tma"
for round in 1 2 3; do
  row="round $round"
  for cfg in "examples/gqa.flash|" "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths" \
             "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths --kv-copy cp.async" \
             "bench/inputs/paged_gqa.flash|--paged 64 --full-lengths"; do
    f=${cfg%%|*}; flags=${cfg#*|}
    # shellcheck disable=SC2086
    gb=$(timeout 60 $T/flash-run $f --shape B=1,H=32,HKV=8,N=1,M=8192,D=128 $flags --csv --warmup 20 --iters 100 2>/dev/null \
      | tail -1 | cut -d, -f15)
    row="$row $gb"
  done
  echo "$row"
done | tee $OUT/b1-rounds.txt
echo "== tables"
grep -c "^ok" $OUT/decode/checks.txt; grep -v "^ok" $OUT/decode/checks.txt | tail -5
cat $OUT/decode/bench/table.md 2>/dev/null | tail -60
cat $OUT/decode/bench/paged.csv
