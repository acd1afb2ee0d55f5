#!/usr/bin/env bash
# Call U (issue 15): the summary kernel with a thread per key block (lane
# ranges reduced by the warp, undecided blocks listed and evaluated a warp
# each). Checks first (GPU summary bytes and O/LSE against the
# interpreter, rounds > 1 and CTAs per query tile > 1 included), the
# backward's summary checks, compute-sanitizer on the summary, gpu-fuzz.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
chk() { local name=$1; shift
  timeout 120 $T/flash-run "$@" --iters 0 > $T/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; tail -8 $T/chk.log; fi
  grep -iE "summary" $T/chk.log | head -2
  cat $T/chk.log >> $OUT/checks.log; }
echo "== forward checks"
chk doc64 examples/document.flash --shape B=2,H=4,N=3000,D=64 --docs 7
chk doc128 examples/document.flash --shape B=2,H=4,N=3000,D=128 --docs 7
chk doc128-pers examples/document.flash --shape B=2,H=4,N=3000,D=128 --docs 7 --persistent=true
chk doc64-2rounds examples/document.flash --shape B=1,H=2,N=20000,D=64 --docs 11
chk doc64-3rounds-t64 examples/document.flash --shape B=1,H=2,N=20000,D=64 --docs 9 --tile Br=64,Bc=64
chk doc128-1doc examples/document.flash --shape B=1,H=2,N=4100,D=128 --docs 1
chk doc64-many examples/document.flash --shape B=3,H=2,N=2500,D=64 --docs 60
chk padding64 examples/key_padding.flash --shape B=3,H=4,N=5000,D=64
chk padding128-t64 examples/key_padding.flash --shape B=2,H=2,N=9000,D=128 --tile Br=64,Bc=64
chk gqa-heads test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1000,D=64 --docs 5
chk padded-window test/GPU/summary-masks.flash --variant padded_window --shape B=3,H=2,N=1500,D=128
chk doc64-mma examples/document.flash --gemm mma.sync --shape B=2,H=2,N=1700,D=64 --docs 6
echo "== backward checks (its own summary, computed and cached)"
chk bwd-doc64 examples/document.flash --bwd --shape B=2,H=4,N=1500,D=64 --docs 7
chk bwd-doc128 examples/document.flash --bwd --shape B=2,H=4,N=1300,D=128 --docs 5
chk bwd-doc128-det examples/document.flash --bwd --deterministic --shape B=1,H=4,N=2000,D=128 --docs 9
chk bwd-padding examples/key_padding.flash --bwd --shape B=3,H=4,N=900,D=64
chk bwd-gqa-heads test/GPU/summary-masks.flash --variant doc_gqa_heads --bwd --shape B=2,H=8,HKV=2,N=1000,D=64 --docs 5
chk bwd-padded-window test/GPU/summary-masks.flash --variant padded_window --bwd --shape B=3,H=2,N=1500,D=128
chk bwd-doc64-mma examples/document.flash --bwd --gemm mma.sync --shape B=2,H=2,N=700,D=64 --docs 4
echo "== compute-sanitizer on the summary kernels"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  # Only the summary kernels (a CTA takes three rounds here: the list's ring reused).
  timeout 100 $SAN --tool $tool --kernel-regex kns=summary --error-exitcode 9 $T/flash-run examples/document.flash \
    --shape B=1,H=2,N=20000,D=64 --docs 9 --tile Br=64,Bc=64 --iters 0 > $OUT/san-$tool.log 2>&1
  echo "$tool fwd exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$tool.log | tr '\n' ' ')"
  timeout 60 $SAN --tool $tool --kernel-regex kns=summary --error-exitcode 9 $T/flash-run examples/document.flash --bwd \
    --shape B=1,H=2,N=700,D=64 --docs 3 --iters 0 > $OUT/san-bwd-$tool.log 2>&1
  echo "$tool bwd exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-bwd-$tool.log | tr '\n' ' ')"
done
echo "== gpu-fuzz (forward 200, backward 80)"
FLASH_RUN=$T/flash-run JOBS=12 timeout 100 bash scripts/gpu-fuzz.sh .device-carry/fz 2>&1 | tail -12
FLASH_RUN=$T/flash-run JOBS=12 timeout 90 bash scripts/gpu-fuzz.sh .device-carry/fzb 2>&1 | tail -12
