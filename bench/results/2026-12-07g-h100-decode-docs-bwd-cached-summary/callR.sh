#!/usr/bin/env bash
# Call R (issue 15), HEAD's portable flash-run: the backward's cached
# summary (flash-run --bwd checks of both paths, memcheck and synccheck,
# aot-documents through the C ABI), then packed documents (20 of
# random lengths, B = 1, H = 16) on both grids beside Flex with a BlockMask
# on the same ids (bench/documents.sh compare, every row checked first),
# then causal D = 128 N = 16384 on both grids in three alternating rounds
# (the bar: the persistent default >= one CTA per tile). Tables last.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
echo "== backward with the cached summary: flash-run --bwd checks (both summary paths)"
chk() { local name=$1; shift
  timeout 90 $T/flash-run "$@" --iters 0 > $T/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; tail -8 $T/chk.log; fi
  grep -E "cached summary|block summary" $T/chk.log | head -3
  cat $T/chk.log >> $OUT/bwd-checks.log; }
chk bwd-doc64 examples/document.flash --bwd --shape B=2,H=4,N=1500,D=64 --docs 7
chk bwd-doc128 examples/document.flash --bwd --shape B=2,H=4,N=1300,D=128 --docs 5
chk bwd-doc64-det examples/document.flash --bwd --deterministic --shape B=2,H=4,N=1100,D=64 --docs 6
chk bwd-doc128-det examples/document.flash --bwd --deterministic --shape B=1,H=4,N=2000,D=128 --docs 9
chk bwd-padding examples/key_padding.flash --bwd --shape B=3,H=4,N=900,D=64
chk bwd-doc_gqa_heads test/GPU/summary-masks.flash --variant doc_gqa_heads --bwd --shape B=2,H=8,HKV=2,N=1000,D=64 --docs 5
chk bwd-doc64-mma examples/document.flash --bwd --gemm mma.sync --shape B=2,H=2,N=700,D=64 --docs 4
echo "== memcheck: the cached backward summary (its kernel with null tensors)"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do
  timeout 200 $SAN --tool $tool --error-exitcode 9 $T/flash-run examples/document.flash --bwd \
    --shape B=1,H=2,N=700,D=64 --docs 3 --iters 0 > $OUT/san-$tool.log 2>&1
  echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|cached summary' $OUT/san-$tool.log | tr '\n' ' ')"
done
echo "== aot-documents (forward and backward cached summaries through the C ABI)"
g++ -O2 -std=c++17 -Iruntime/include -Ipython-free-driver/examples/aot -I.device-carry/aot/gen-doc \
  python-free-driver/examples/aot/documents_main.cpp .device-carry/aot/gen-doc/document.cpp \
  runtime/lib/*.cpp -ldl -lpthread -o $T/aot-documents > $OUT/aot-build.log 2>&1 || tail -5 $OUT/aot-build.log
timeout 120 $T/aot-documents 2>&1 | tee $OUT/aot-documents.log; echo "aot-documents exit ${PIPESTATUS[0]}"
OUT=$OUT/docs TOOLS=flash-run timeout 330 bash bench/documents.sh compare "64 128" "8192 16384 32768" \
  > $OUT/docs.log 2>&1
echo "docs exit $?; checks ok $(grep -c '^ok' $OUT/docs.log), FAIL $(grep -c '^FAIL' $OUT/docs.log)"
echo "== causal D=128 N=16384 B=1 H=16: ms persistent / one CTA per tile"
for round in 1 2 3; do
  p=$(timeout 60 $T/flash-run examples/causal.flash --shape B=1,H=16,N=16384,D=128 --persistent=true \
      --iters 30 --csv 2>/dev/null | tail -1 | cut -d, -f10)
  o=$(timeout 60 $T/flash-run examples/causal.flash --shape B=1,H=16,N=16384,D=128 --persistent=false \
      --iters 30 --csv 2>/dev/null | tail -1 | cut -d, -f10)
  echo "round $round persistent $p one-per-tile $o"
done | tee $OUT/causal-grids.txt
echo "== tables"
grep -E "flex/flashc|create" $OUT/docs.log | tail -20
