#!/usr/bin/env bash
# NOT RUN: no device was lent after call D (the carry must hold flash-run
# and flashc built from this tree). Call F (issue 16),
# --paged-last-block=tma: a one-warpgroup paged kernel
# copies the block a sequence ends in by TMA too (warp 0, a box per lane)
# and zeroes its rows past the sequence after the wait, instead of every
# thread gathering it by cp.async (128 registers instead of 147-168 at
# D = 64 and 128); the gather rows are the default (--paged-last-block=gather). gpu-check's paged and varlen sections,
# compute-sanitizer over the new path, then times against main and dense.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== gpu-check paged,varlen (wgmma)"
FLASH_RUN=$T/flash-run GEMMS=auto SECTIONS=paged,varlen timeout 200 scripts/gpu-check.sh > $OUT/gpu-check.txt 2>&1
tail -1 $OUT/gpu-check.txt; grep -A6 '^FAIL' $OUT/gpu-check.txt | head -40
echo "== compute-sanitizer"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
san() { local name=$1 tool=$2; shift 2
  timeout 40 $CS --tool $tool $T/flash-run "$@" --paged-last-block=tma --iters 0 > $OUT/san-$name-$tool.log 2>&1
  echo "$name $tool: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$name-$tool.log | tail -1)"; }
for tool in memcheck racecheck synccheck; do
  san d64p16 $tool test/Driver/Inputs/paged-no-page.flash --paged 16 --shape B=3,H=4,HKV=2,N=300,M=700,D=64
  san decode $tool test/Driver/Inputs/paged-no-page.flash --paged 16 --shape B=3,H=8,HKV=2,N=1,M=1500,D=128 --splits 3
done
san ws racecheck test/Driver/Inputs/chunked-prefill.flash --shape B=3,H=4,HKV=2,N=700,M=1200,D=128 --tile Br=128,Bc=128
time1() { # tool file shape flags... -> ms (column 10) or FAIL
  local tool=$1 f=$2 shape=$3; shift 3
  local ms; ms=$(timeout 90 $T/$tool $f --shape $shape "$@" --csv --iters 30 --check-shape B=3,H=4,HKV=1,N=700,M=900 2>>$OUT/time.err | tail -1 | cut -d, -f10)
  echo "${ms:-FAIL}"
}
P=bench/inputs/paged_gqa.flash; G=examples/gqa.flash; R=flash-run; M=flash-run
S=B=2,H=32,HKV=8,N=4096,M=4096,D=64
echo "== $S (ms): dense | p16 tma | p16 gather | p64 tma | p64 gather | p16 Br=128 (producer) | dense"
echo "| $(time1 $R $G $S) | $(time1 $R $P $S --paged 16 --full-lengths --paged-last-block=tma) | $(time1 $M $P $S --paged 16 --full-lengths) | $(time1 $R $P $S --paged 64 --full-lengths --paged-last-block=tma) | $(time1 $M $P $S --paged 64 --full-lengths) | $(time1 $R $P $S --paged 16 --full-lengths --tile Br=128,Bc=128) | $(time1 $R $G $S) |" | tee -a $OUT/times.txt
S=B=2,H=32,HKV=8,N=4096,M=4096,D=128
echo "== $S (ms): dense | dense one-CTA-per-tile | p16 (producer) | p64 (producer) | p16 off tma | p16 off gather | dense"
echo "| $(time1 $R $G $S) | $(time1 $R $G $S --persistent=false) | $(time1 $R $P $S --paged 16 --full-lengths) | $(time1 $R $P $S --paged 64 --full-lengths) | $(time1 $R $P $S --paged 16 --full-lengths --warp-specialize=off --paged-last-block=tma) | $(time1 $M $P $S --paged 16 --full-lengths --warp-specialize=off) | $(time1 $R $G $S) |" | tee -a $OUT/times.txt
echo "== decode GB/s (column 15): B=8 H=32 HKV=8 N=1 M=8192 D=128: dense | p16 tma | p16 gather | p64 tma | p64 gather"
gbs() { local tool=$1 f=$2; shift 2; local v; v=$(timeout 90 $T/$tool $f --shape B=8,H=32,HKV=8,N=1,M=8192,D=128 "$@" --csv --iters 50 --check-shape B=3,H=8,HKV=2,N=1,M=900 2>>$OUT/time.err | tail -1 | cut -d, -f15); echo "${v:-FAIL}"; }
echo "| $(gbs $R $G) | $(gbs $R $P --paged 16 --full-lengths --paged-last-block=tma) | $(gbs $M $P --paged 16 --full-lengths) | $(gbs $R $P --paged 64 --full-lengths --paged-last-block=tma) | $(gbs $M $P --paged 64 --full-lengths) |" | tee -a $OUT/times.txt
echo "== errors"; sort -u $OUT/time.err | head -10
