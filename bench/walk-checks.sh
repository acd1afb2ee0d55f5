#!/usr/bin/env bash
# The checking device call of the walk over visible blocks: the sink +
# window tile A/B (the warp-specialized walk against the one-warpgroup
# 64 x 64 walk, same call), every example against the interpreter
# (scripts/gpu-check.sh, which now runs test/GPU/pieces.flash too), the
# fuzzer's cases (.device-carry/fuzz), the runtime's GPU tests and
# compute-sanitizer on the walking kernels. Expects
# .device-carry/flashc-tools.tar.xz.
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
FR="$T/flash-run"
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
echo "== sink + window tiles (B=1, H=16)"
echo "tile,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/sink-tiles.csv"
for D in 64 128; do for N in 8192 16384 32768; do
  for t in default "Br=64,Bc=64" "Br=64,Bc=128" "Br=128,Bc=64"; do
    flags=""; [ $t != default ] && flags="--tile $t"
    [ $t = "Br=64,Bc=64" ] || [ $t = "Br=64,Bc=128" ] && flags="$flags --warp-specialize=off"
    # shellcheck disable=SC2086
    "$FR" examples/sink_window.flash --shape B=1,H=16,N=$N,D=$D $flags --csv 2>&1 | tail -1 | sed "s/^/$t,/"
  done
done; done | tee -a "$OUT/sink-tiles.csv"
echo "== gpu-check"
FLASH_RUN="$FR" scripts/gpu-check.sh > "$OUT/gpu-check.log" 2>&1
tail -1 "$OUT/gpu-check.log"; grep -A6 "^FAIL" "$OUT/gpu-check.log" | head -30
echo "== gpu-fuzz"
FLASH_RUN="$FR" JOBS=8 scripts/gpu-fuzz.sh .device-carry/fuzz > "$OUT/gpu-fuzz.log" 2>&1
tail -1 "$OUT/gpu-fuzz.log"; grep -A4 "^FAIL" "$OUT/gpu-fuzz.log" | head -20
echo "== flashrt-tests"
"$T/flashrt-tests" > "$OUT/flashrt-tests.log" 2>&1; tail -2 "$OUT/flashrt-tests.log"
echo "== compute-sanitizer (walking kernels at small shapes)"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for spec in "D=128,N=700" "D=128,N=700 --persistent=false" "D=64,N=700" "D=64,N=700 --tile Br=64,Bc=64 --warp-specialize=off"; do
    # shellcheck disable=SC2086
    timeout 150 "$sanitizer" --tool $tool "$FR" examples/sink_window.flash --shape B=1,H=2,$spec \
      --iters 0 > "$T/san.log" 2>&1
    echo "$tool sink_window $spec: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$T/san.log" | tail -1)" | tee -a "$OUT/sanitizer.txt"
  done
done
