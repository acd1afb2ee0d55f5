#!/usr/bin/env bash
# Call C (issue 16): the decode, packed and paged sections of gpu-check,
# then decode beside SDPA's flash and cuDNN backends over the whole grid
# (GQA 32/8, 64/8, MHA; B 1-128; M 2k-128k) with the copy rate of the same
# run, paged decode (pages 16, 32, 64 by TMA; 16 and 32 gathered by
# cp.async) beside dense, two alternating B = 1 rounds, and a paged
# prefill (page 16 by TMA and gathered) beside dense.
set -u
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
OUT=$OUT/decode SKIP_SANITIZER=1 CHECK_SECTIONS=split-keys,packed,paged \
  PAGED="1/32/8/8192 8/32/8/8192 32/32/8/8192 1/32/8/32768" PAGES="16 32 64" PAGES_GATHERED="16 32" \
  timeout 380 bash scripts/device-decode.sh
echo "decode exit $?"
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
echo "== B = 1 paged rounds (GB/s): dense tma | p16 tma | p16 cp.async | p32 tma | p32 cp.async"
for round in 1 2; do
  row="round $round"
  for cfg in "examples/gqa.flash|" "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths" \
             "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths --kv-copy cp.async" \
             "bench/inputs/paged_gqa.flash|--paged 32 --full-lengths" \
             "bench/inputs/paged_gqa.flash|--paged 32 --full-lengths --kv-copy cp.async"; do
    f=${cfg%%|*}; flags=${cfg#*|}
    # shellcheck disable=SC2086
    gb=$(timeout 40 $T/flash-run $f --shape B=1,H=32,HKV=8,N=1,M=8192,D=128 $flags --csv --warmup 20 --iters 100 2>/dev/null \
      | tail -1 | cut -d, -f15)
    row="$row | ${gb:-FAIL}"
  done
  echo "$row"
done | tee $OUT/b1-rounds.txt
echo "== paged prefill B=2 H=32 HKV=8 N=M=4096 (ms): dense tma | p16 tma | p16 cp.async | p64 tma"
for cfg in "examples/gqa.flash|" "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths" \
           "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths --kv-copy cp.async" \
           "bench/inputs/paged_gqa.flash|--paged 64 --full-lengths"; do
  f=${cfg%%|*}; flags=${cfg#*|}
  # shellcheck disable=SC2086
  ms=$(timeout 60 $T/flash-run $f --shape B=2,H=32,HKV=8,N=4096,M=4096,D=128 $flags --csv --iters 30 --check-shape B=1,H=4,HKV=1,N=300,M=300 2>>$OUT/prefill.err \
    | tail -1 | cut -d, -f10)
  printf ' | %s' "${ms:-FAIL}"
done | tee $OUT/prefill.txt; echo
echo "== tables"
grep -c "^ok" $OUT/decode/checks.txt; grep -v "^ok" $OUT/decode/checks.txt | tail -5
cat $OUT/decode/bench/table.md 2>/dev/null | tail -60
cat $OUT/decode/bench/paged.csv
