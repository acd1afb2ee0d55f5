#!/usr/bin/env bash
# Call A (issue 15): the summary on the ticket grid (flash-run) against HEAD
# 6a3fe13 (flash-run-base). Checks first, then documents beside Flex, then
# gpu-fuzz and compute-sanitizer on the new tool.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
chk() { # name, args...
  local name=$1; shift
  timeout 60 $T/flash-run "$@" --iters 0 > $T/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; tail -6 $T/chk.log; fi
  cat $T/chk.log >> $OUT/checks.log
}
echo "== checks (new tool)"
chk doc64 examples/document.flash --shape B=2,H=4,N=3000,D=64 --docs 7
chk doc128 examples/document.flash --shape B=2,H=4,N=3000,D=128 --docs 7
chk doc64-bc32-2chunks examples/document.flash --tile Br=64,Bc=32 --shape B=2,H=2,N=5000,D=64 --docs 9
chk doc64-bc32-3chunks-1doc examples/document.flash --tile Br=64,Bc=32 --shape B=1,H=2,N=9000,D=64 --docs 1
chk doc64-mma examples/document.flash --gemm mma.sync --shape B=2,H=2,N=1500,D=64 --docs 4
chk doc-n1 examples/document.flash --shape B=3,H=2,N=1,D=64
chk doc-n129 examples/document.flash --shape B=2,H=2,N=129,M=129,D=128 --docs 3
chk padding64 examples/key_padding.flash --shape B=3,H=4,N=2000,D=64
chk padding128 examples/key_padding.flash --shape B=3,H=4,N=2000,D=128
chk doc_gqa_heads test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1500,D=64 --docs 5
chk padded_window test/GPU/summary-masks.flash --variant padded_window --shape B=2,H=2,N=1700,D=128
chk doc-persistent examples/document.flash --persistent=true --shape B=2,H=2,N=3000,D=128 --docs 6
echo "== documents beside Flex (new, base)"
OUT=$OUT/docs TOOLS="flash-run flash-run-base" GRIDS=default timeout 290 bash bench/documents.sh compare "64 128" "8192 16384 32768" > $OUT/docs.log 2>&1
echo "docs exit $?; checks ok $(grep -c "^ok" $OUT/docs.log), FAIL $(grep -c "^FAIL" $OUT/docs.log)"; tail -16 $OUT/docs.log
echo "== gpu-fuzz (new)"
FLASH_RUN=$T/flash-run JOBS=12 CASE_TIMEOUT=60 timeout 120 bash scripts/gpu-fuzz.sh .device-carry/fuzz4 > $OUT/fuzz.log 2>&1; echo "fuzz exit $?"; tail -4 $OUT/fuzz.log
echo "== compute-sanitizer (new)"
S=/usr/local/cuda/bin/compute-sanitizer
for c in "memcheck:examples/document.flash --docs 5 --shape B=2,H=2,N=700,D=64" \
         "memcheck:examples/key_padding.flash --shape B=3,H=2,N=500,D=64" \
         "memcheck:examples/document.flash --docs 5 --tile Br=64,Bc=32 --shape B=1,H=2,N=4200,D=64" \
         "racecheck:examples/document.flash --docs 5 --shape B=2,H=2,N=700,D=64" \
         "synccheck:examples/document.flash --docs 5 --shape B=2,H=2,N=700,D=64"; do
  tool=${c%%:*}
  timeout 45 $S --tool $tool $T/flash-run ${c#*:} --iters 0 > $T/san.log 2>&1
  echo "$tool ${c#*:}: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' $T/san.log | tail -1) $(grep -c ' ok$' $T/san.log) ok"
  cat $T/san.log >> $OUT/sanitizer.log
done
