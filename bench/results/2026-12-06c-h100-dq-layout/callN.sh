#!/usr/bin/env bash
# Call N (same warm machine as M): gpu-fuzz forward and backward (seed
# 93000), compute-sanitizer memcheck/synccheck/racecheck on the new
# backward kernels at a small shape, ncu's shared-store conflicts.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
echo "== gpu-fuzz backward (200 cases, seed 93000)"
cp .device-carry/fuzz/bwd-ok.txt /tmp/cases-bwd-dir.txt
mkdir -p $T/fz && cp .device-carry/fuzz/*.flash $T/fz/ && cp .device-carry/fuzz/bwd-ok.txt $T/fz/cases.txt
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=60 timeout 200 bash scripts/gpu-fuzz.sh $T/fz > $OUT/fuzz-bwd.log 2>&1; tail -n 1 $OUT/fuzz-bwd.log; grep -A8 '^FAIL' $OUT/fuzz-bwd.log | head -30
echo "== gpu-fuzz forward (200 cases)"
cp .device-carry/fuzz/cases.txt $T/fz/cases.txt
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=60 timeout 120 bash scripts/gpu-fuzz.sh $T/fz > $OUT/fuzz-fwd.log 2>&1; tail -n 1 $OUT/fuzz-fwd.log; grep -A8 '^FAIL' $OUT/fuzz-fwd.log | head -20
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s() { local tool=$1 tag=$2; shift 2
  FLASHC_CACHE_DIR=$T/cache-san timeout 90 $san --tool $tool $T/flash-run "$@" --bwd --iters 0 > $OUT/san-$tool-$tag.log 2>&1
  echo "$tool $tag rc=$? :: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$tool-$tag.log | tail -1)"; }
echo "== compute-sanitizer"
s memcheck d128 examples/full.flash --shape B=1,H=2,N=300,D=128
s memcheck d64mma examples/causal.flash --shape B=1,H=2,N=300,D=64 --gemm=mma.sync
s memcheck d256 examples/causal.flash --shape B=1,H=1,N=200,D=256
s synccheck d128 examples/full.flash --shape B=1,H=2,N=300,D=128
s synccheck d64det examples/causal.flash --shape B=1,H=2,N=300,D=64 --deterministic
s racecheck d128 examples/full.flash --shape B=1,H=2,N=300,D=128
s racecheck d64mma examples/causal.flash --shape B=1,H=2,N=300,D=64 --gemm=mma.sync
echo "== ncu shared-store conflicts, new default D=128 full N=4096"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
FLASHC_CACHE_DIR=$T/cache-ncu timeout 120 $ncu --kernel-name regex:'_bwd(_convert)?$' --launch-skip 4 --launch-count 2 --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight $T/flash-run examples/full.flash --bwd --shape B=4,H=16,N=4096,D=128 --iters 4 --warmup 1 > $OUT/ncu.txt 2>&1; grep -E "full_bwd|Duration|bank|way" $OUT/ncu.txt | head -14
