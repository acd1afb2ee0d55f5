#!/usr/bin/env bash
# Call E (issue 15) on the H200: HEAD's flash-run. The summary checks (two
# launches each), packed documents beside Flex (8k-32k, D = 64 and 128),
# then sink + window and prefix-LM beside Flex (bench/walk.sh), then the
# summary's floor at short N. Tables last.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
chk() { local name=$1; shift
  timeout 40 $T/flash-run "$@" --iters 0 > $T/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; tail -6 $T/chk.log; fi
  cat $T/chk.log >> $OUT/checks.log; }
echo "== summary checks, two launches each"
chk doc64 examples/document.flash --shape B=2,H=4,N=3000,D=64 --docs 7
chk doc128-persistent examples/document.flash --persistent=true --shape B=2,H=2,N=3000,D=128 --docs 6
chk padding64 examples/key_padding.flash --shape B=3,H=4,N=2000,D=64
chk doc_gqa_heads test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1500,D=64 --docs 5
chk padded_window test/GPU/summary-masks.flash --variant padded_window --shape B=2,H=2,N=1700,D=128
echo "== the cached summary through the AOT C ABI (aot-documents)"
g++ -O2 -std=c++17 -Iruntime/include -Ipython-free-driver/examples/aot -I.device-carry/aot/gen-doc \
  python-free-driver/examples/aot/documents_main.cpp .device-carry/aot/gen-doc/document.cpp \
  runtime/lib/*.cpp -ldl -lpthread -o $T/aot-documents > $OUT/aot-build.log 2>&1 || tail -5 $OUT/aot-build.log
timeout 120 $T/aot-documents 2>&1 | tee $OUT/aot-documents.log; echo "aot-documents exit ${PIPESTATUS[0]}"
echo "== documents beside Flex"
OUT=$OUT/docs TOOLS="flash-run" GRIDS=default timeout 240 bash bench/documents.sh compare "64 128" "8192 16384 32768" > $OUT/docs.log 2>&1
echo "docs exit $?; checks ok $(grep -c "^ok" $OUT/docs.log), FAIL $(grep -c "^FAIL" $OUT/docs.log)"
echo "== summary floor (documents, B=1, H=16)"
for D in 64 128; do for N in 512 2048 8192 16384; do
  timeout 30 $T/flash-run examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 4 --csv 2>&1 | tail -1
done; done | tee $OUT/floor.txt
echo "== walk.sh"
OUT=$OUT/walk timeout 280 bash bench/walk.sh > $OUT/walk.log 2>&1; echo "walk exit $?"; grep "check failures" $OUT/walk.log
echo "== tables"
grep -E "flex/flashc|create" $OUT/docs.log | tail -12
tail -14 $OUT/walk.log
