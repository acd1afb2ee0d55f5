#!/usr/bin/env bash
# Call B (issue 15): ticket-grid summary, consumer items of 128 key blocks
# (flash-run) and of 32 (flash-run-c32), against HEAD 6a3fe13
# (flash-run-base); ncu of both summaries at D = 64, 16k.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
chk() { local tool=$1 name=$2; shift 2
  timeout 60 $T/$tool "$@" --iters 0 > $T/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $tool $name"; else echo "FAIL $tool $name (exit $rc)"; tail -6 $T/chk.log; fi
  cat $T/chk.log >> $OUT/checks.log; }
for tool in flash-run flash-run-c32; do
chk $tool doc64 examples/document.flash --shape B=2,H=4,N=3000,D=64 --docs 7
chk $tool doc128-5chunks examples/document.flash --shape B=1,H=2,N=15000,M=15000,D=128 --docs 30 --check-shape B=1,H=2,N=15000,D=128
chk $tool doc64-bc32 examples/document.flash --tile Br=64,Bc=32 --shape B=1,H=2,N=9000,D=64 --docs 3
chk $tool padding64 examples/key_padding.flash --shape B=3,H=4,N=2000,D=64
chk $tool doc_gqa_heads test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1500,D=64 --docs 5
done
echo "== documents beside Flex"
OUT=$OUT/docs TOOLS="flash-run-c32 flash-run flash-run-base" GRIDS=default timeout 260 bash bench/documents.sh compare "64 128" "16384 32768" > $OUT/docs.log 2>&1
echo "docs exit $?; checks ok $(grep -c "^ok" $OUT/docs.log), FAIL $(grep -c "^FAIL" $OUT/docs.log)"; grep -E "flash-run" $OUT/docs.log | tail -12
echo "== ncu summary D=64 16k"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for tool in flash-run flash-run-c32; do
timeout 100 $NCU --clock-control none -k regex:"^document_summary\$" --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section SourceCounters --import-source no -o $T/$tool-sum \
  $T/$tool examples/document.flash --shape B=1,H=16,N=16384,D=64 --docs 20 --iters 3 --warmup 1 \
  --check-shape B=1,H=2,N=2048,D=64 > $T/ncu.log 2>&1
echo "ncu $tool exit $?"; tail -2 $T/ncu.log
if [ -f $T/$tool-sum.ncu-rep ]; then
  $NCU -i $T/$tool-sum.ncu-rep --page details > $OUT/ncu-$tool-details.txt 2>&1
  $NCU -i $T/$tool-sum.ncu-rep --page source --csv --print-source sass > $OUT/ncu-$tool-sass.csv 2>&1
  grep -E "Duration|Issue Slots Busy|Achieved Occupancy|One or More Eligible|No Eligible|Grid Size" $OUT/ncu-$tool-details.txt | head -8
fi
done
