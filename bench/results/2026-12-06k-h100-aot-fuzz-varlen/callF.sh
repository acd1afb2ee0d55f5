#!/usr/bin/env bash
# Call F (issues 15, 16): HEAD's flash-run and aot-documents. The cached
# summary through the AOT C ABI (and memcheck over it), gpu-fuzz over 300
# fresh cases (seed 2026120750), then varlen prefill at N = 1k and 4k
# (persistent and one CTA per tile) beside the dense kernel and SDPA.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== aot-documents"
g++ -O2 -std=c++17 -Iruntime/include -Ipython-free-driver/examples/aot -I.device-carry/aot/gen-doc \
  python-free-driver/examples/aot/documents_main.cpp .device-carry/aot/gen-doc/document.cpp \
  runtime/lib/*.cpp -ldl -lpthread -o $T/aot-documents > $OUT/aot-build.log 2>&1 || tail -5 $OUT/aot-build.log
timeout 120 $T/aot-documents 2>&1 | tee $OUT/aot-documents.log; echo "aot-documents exit ${PIPESTATUS[0]}"
S=/usr/local/cuda/bin/compute-sanitizer
timeout 100 $S --tool memcheck --error-exitcode 9 $T/aot-documents > $OUT/aot-memcheck.log 2>&1; echo "memcheck exit $?"; tail -2 $OUT/aot-memcheck.log
echo "== gpu-fuzz"
FLASH_RUN=$T/flash-run JOBS=12 CASE_TIMEOUT=60 timeout 120 bash scripts/gpu-fuzz.sh .device-carry/fuzz5 > $OUT/fuzz.log 2>&1; echo "fuzz exit $?"; tail -4 $OUT/fuzz.log
echo "== varlen 1k, 4k"
PEERS=.device-carry/peers.py OUT=$OUT/varlen timeout 150 bash bench/varlen.sh "64 128" "1024 4096" > $OUT/varlen.log 2>&1; echo "varlen exit $?"
cat $OUT/varlen/table.md 2>/dev/null | tail -20
