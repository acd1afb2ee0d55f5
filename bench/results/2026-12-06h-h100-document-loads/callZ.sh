#!/usr/bin/env bash
# Call Z (issue 15): predicated mask loads at the tile's keys (doc[b, j]):
# SASS of the D = 64 document kernel, correctness (memcheck on a ragged
# shape, gpu-fuzz 300 cases, targeted checks), then documents at D = 64
# beside Flex: base (HEAD f638977), new, new capped at 128 registers.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== SASS of the D = 64 document kernel (new)"
/usr/local/cuda/bin/ptxas -arch=sm_90a .device-carry/doc64.ptx -o $T/doc64.cubin && /usr/local/cuda/bin/cuobjdump --dump-sass $T/doc64.cubin > $OUT/doc64.sass 2>&1
awk '/Function : document$/{f=1} /Function : document_summary/{f=0} f' $OUT/doc64.sass > $T/main.sass
echo "LDG $(grep -c 'LDG' $T/main.sass), predicated LDG $(grep -c '@!\?P[0-9T] *LDG' $T/main.sass), BRA $(grep -c 'BRA' $T/main.sass), HGMMA $(grep -c HGMMA $T/main.sass), local $(grep -c 'LDL\|STL' $T/main.sass)"
echo "== memcheck (ragged, D = 64 and 128)"
san=/usr/local/cuda/bin/compute-sanitizer
for D in 64 128; do FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool memcheck $T/flash-run examples/document.flash --shape B=2,H=2,N=333,M=333,D=$D --docs 5 --iters 0 > $OUT/san-$D.log 2>&1; echo "D=$D rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$D.log)"; done
echo "== targeted checks (new)"
chk() { out=$(FLASHC_CACHE_DIR=$T/cache-chk timeout 60 $T/flash-run "$@" --iters 0 2>&1); rc=$?; if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -4; fi; }
{
for D in 64 128 256; do
  chk examples/document.flash --shape B=2,H=4,N=1000,D=$D --docs 7
  chk examples/document.flash --shape B=1,H=2,N=3001,D=$D --docs 40 --layout bshd
  chk test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=777,D=$D --docs 5
done
chk examples/document.flash --shape B=2,H=4,N=1000,D=64 --kv-copy cp.async
chk examples/document.flash --shape B=2,H=4,N=1000,D=128 --persistent=true
chk examples/document.flash --shape B=1,H=2,N=1,D=64
chk examples/document.flash --shape B=3,H=2,N=129,D=64 --docs 2
for D in 64 128; do
  chk examples/document.flash --bwd --shape B=2,H=4,N=1000,D=$D --docs 7
  chk examples/document.flash --bwd --deterministic --shape B=1,H=2,N=777,D=$D --docs 5
  chk examples/document.flash --bwd --gemm mma.sync --shape B=1,H=2,N=555,D=$D --docs 5
  chk test/GPU/summary-masks.flash --variant doc_gqa_heads --bwd --shape B=2,H=8,HKV=2,N=777,D=$D --docs 5
done
} > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A4 '^FAIL' $OUT/checks.log | head -20
echo "== documents at D = 64 (base, new, cap), Flex on the same ids"
OUT=$OUT/docs GRIDS=default timeout 330 bash bench/documents.sh compare 64 "8192 16384 32768" > $OUT/docs.log 2>&1
echo "checks: ok $(grep -c "^ok" $OUT/docs.log), FAIL $(grep -c "^FAIL" $OUT/docs.log)"; tail -12 $OUT/docs.log
echo "== gpu-fuzz (300 cases, seed 2026120701, new)"
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=100 timeout 150 bash scripts/gpu-fuzz.sh .device-carry/fuzz4 > $OUT/gpu-fuzz.log 2>&1; tail -1 $OUT/gpu-fuzz.log; grep -A8 '^FAIL' $OUT/gpu-fuzz.log | head -20
