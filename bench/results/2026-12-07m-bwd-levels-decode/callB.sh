#!/usr/bin/env bash
# Call B (issue 14): every backward check case at the default level (2)
# and at level 3, then compute-sanitizer (racecheck, synccheck, memcheck)
# over the level-2 and level-3 kernels at a small shape, D = 64 and 128.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check-$L timeout 100 $T/flash-run "$@" --bwd --bwd-merge-barriers=$L --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    L=$L $*"; else echo "FAIL  L=$L $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
for L in 2 3; do
  export L
  echo "== checks at L = $L ($(wc -l < .device-carry/cases.txt) cases)"
  timeout 80 xargs -d '\n' -P 14 -I{} bash -c 'one $1' _ {} < .device-carry/cases.txt > $OUT/checks-L$L.log 2>&1
  echo "ok $(grep -c '^ok' $OUT/checks-L$L.log), FAIL $(grep -c '^FAIL' $OUT/checks-L$L.log)"; grep -A6 '^FAIL' $OUT/checks-L$L.log | head -20
done
echo "== compute-sanitizer (B=1 H=2 N=300)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for c in "racecheck 3 64 full" "racecheck 2 128 full" "racecheck 3 64 causal --deterministic" \
         "synccheck 3 64 full" "memcheck 3 64 causal" "synccheck 2 128 causal" "memcheck 2 128 full"; do set -- $c
  log=$OUT/san-$1-L$2-D$3-$4${5:+-det}.log
  FLASHC_CACHE_DIR=$T/cache-san timeout 45 $CS --tool $1 $T/flash-run examples/$4.flash ${5:-} --bwd --bwd-merge-barriers=$2 --shape B=1,H=2,N=300,D=$3 --iters 0 > $log 2>&1
  echo "$1 L=$2 D=$3 $4 ${5:-}: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $log | tail -1)"
done
