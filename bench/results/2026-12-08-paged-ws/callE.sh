#!/usr/bin/env bash
# Call E (issue 16): the paged producer warpgroup as the default. gpu-check's
# paged and varlen sections (wgmma), compute-sanitizer over the
# warp-specialized chunked prefill (varlen queries over a paged cache), then
# prefill times over a paged cache against the dense kernel at D = 128 and
# D = 64 (each row checked against the interpreter first).
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== gpu-check paged,varlen (wgmma)"
FLASH_RUN=$T/flash-run GEMMS=auto SECTIONS=paged,varlen timeout 200 scripts/gpu-check.sh > $OUT/gpu-check.txt 2>&1
tail -1 $OUT/gpu-check.txt; grep -A6 '^FAIL' $OUT/gpu-check.txt | head -40
echo "== compute-sanitizer (warp-specialized chunked prefill, B=3 H=4 HKV=2 N=700 M=1200 D=128)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  timeout 45 $CS --tool $tool $T/flash-run test/Driver/Inputs/chunked-prefill.flash --shape B=3,H=4,HKV=2,N=700,M=1200,D=128 --tile Br=128,Bc=128 --iters 0 > $OUT/san-$tool.log 2>&1
  echo "$tool: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$tool.log | tail -1)"
done
time1() { # tool file shape flags... -> ms (column 10) or FAIL
  local f=$1 shape=$2; shift 2
  local ms; ms=$(timeout 90 $T/flash-run $f --shape $shape "$@" --csv --iters 30 --check-shape B=3,H=4,HKV=1,N=700,M=900 2>>$OUT/time.err | tail -1 | cut -d, -f10)
  echo "${ms:-FAIL}"
}
P=bench/inputs/paged_gqa.flash; G=examples/gqa.flash
for round in 1; do
for D in 128 64; do
  S=B=2,H=32,HKV=8,N=4096,M=4096,D=$D
  echo "== round $round, $S (ms): dense | dense Br=128 | dense one-CTA-per-tile | p16 | p16 ws=off | p16 ws=on | p16 Br=128 | p64 | p64 Br=128"
  echo "| $(time1 $G $S) | $(time1 $G $S --tile Br=128,Bc=128) | $(time1 $G $S --persistent=false) | $(time1 $P $S --paged 16 --full-lengths) | $(time1 $P $S --paged 16 --full-lengths --warp-specialize=off) | $(time1 $P $S --paged 16 --full-lengths --warp-specialize=on) | $(time1 $P $S --paged 16 --full-lengths --tile Br=128,Bc=128) | $(time1 $P $S --paged 64 --full-lengths) | $(time1 $P $S --paged 64 --full-lengths --tile Br=128,Bc=128) |" | tee -a $OUT/prefill-$D.txt
done
S=B=1,H=32,HKV=8,N=16384,M=16384,D=128
echo "== round $round, $S (ms): dense | dense one-CTA-per-tile | p16 | p64 | p256"
echo "| $(time1 $G $S) | $(time1 $G $S --persistent=false) | $(time1 $P $S --paged 16 --full-lengths) | $(time1 $P $S --paged 64 --full-lengths) | $(time1 $P $S --paged 256 --full-lengths) |" | tee -a $OUT/prefill-16k.txt
done
echo "== errors"; sort -u $OUT/time.err | head -10
