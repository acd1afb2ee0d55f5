#!/usr/bin/env bash
# Run in session 2026-12-08 (tree 7bc032b; carry: flash-run of this tree,
# flash-run-old of e176551, .device-carry/full_bwd_n300_d128.cubin).
# Call D (issue 16): the warp-specialized paged prefill (the producer
# warpgroup gathers the block a sequence ends in): the paged prefill cases
# gpu-check's paged section now has and three from before, compute-sanitizer
# over the paged prefill kernel, then a prefill over a paged cache against
# the dense kernel, this build (flash-run) beside the previous one
# (flash-run-old, e176551: one-warpgroup paged prefill); and the SASS of
# the backward kernel whose racecheck reports call B printed.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== checks: warp-specialized paged prefill (and paged decode, unchanged) against the interpreter"
cases="test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 16 --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 32 --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 128 --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 256 --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
test/Driver/Inputs/paged-masks.flash --warp-specialize=on --variant window --paged 32 --shape B=4,H=8,HKV=2,N=800,M=1500,D=128
test/Driver/Inputs/paged-masks.flash --warp-specialize=on --variant softcap_alibi --paged 32 --shape B=4,H=8,HKV=2,N=800,M=1500,D=128
test/Driver/Inputs/paged-masks.flash --warp-specialize=on --variant documents --paged 16 --shape B=4,H=8,HKV=2,N=800,M=1500,D=128
examples/paged_decode.flash --shape B=3,H=4,HKV=4,N=700,M=1500,D=128 --layout bshd
test/Driver/Inputs/paged-no-page.flash --paged 64 --shape B=4,H=8,HKV=2,N=600,M=1700,D=128
test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 16 --shape B=5,H=8,HKV=2,N=3000,M=3000,D=128
test/Driver/Inputs/paged-no-page.flash --paged 16 --shape B=6,H=32,HKV=8,N=1,M=3000,D=128 --splits 3"
one() { out=$(timeout 60 $T/flash-run "$@" --iters 0 2>&1); rc=$?; if [ $rc -eq 0 ] && echo "$out" | grep -q "ok"; then echo "ok    $* | $(echo "$out" | grep -m1 -o 'Br=[0-9]* Bc=[0-9]* threads=[0-9]*')"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -5; fi; }
export -f one; export T FLASHC_CACHE_DIR
echo "$cases" | timeout 120 xargs -d '\n' -P 6 -I{} bash -c 'one $1' _ {} > $OUT/checks.txt 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.txt), FAIL $(grep -c '^FAIL' $OUT/checks.txt)"; grep -A5 '^FAIL' $OUT/checks.txt | head -30
echo "== SASS near the backward racecheck reports"
cuobjdump -sass .device-carry/full_bwd_n300_d128.cubin > $OUT/full_bwd.sass 2>&1 || /usr/local/cuda/bin/cuobjdump -sass .device-carry/full_bwd_n300_d128.cubin > $OUT/full_bwd.sass 2>&1
grep -n "Function : full_bwd$" $OUT/full_bwd.sass | head -2
awk '/Function : full_bwd$/ {on = 1} /Function : full_bwd_convert/ {on = 0} on' $OUT/full_bwd.sass | grep -E '/\*0(120|180|460|5be0|5c00|6e40)\*/' 
for round in 1 2; do
echo "== prefill B=2 H=32 HKV=8 N=M=4096 D=128 (ms, each checked first): dense | p16 | p64 | p16 old | p64 old | dense"
row=""
for cfg in "flash-run|examples/gqa.flash|" "flash-run|bench/inputs/paged_gqa.flash|--warp-specialize=on --paged 16 --full-lengths" \
           "flash-run|bench/inputs/paged_gqa.flash|--warp-specialize=on --paged 64 --full-lengths" \
           "flash-run-old|bench/inputs/paged_gqa.flash|--paged 16 --full-lengths" \
           "flash-run-old|bench/inputs/paged_gqa.flash|--paged 64 --full-lengths" "flash-run|examples/gqa.flash|"; do
  IFS='|' read -r tool f flags <<< "$cfg"
  # shellcheck disable=SC2086
  ms=$(timeout 60 $T/$tool $f --shape B=2,H=32,HKV=8,N=4096,M=4096,D=128 $flags --csv --iters 30 --check-shape B=3,H=4,HKV=1,N=700,M=900 2>>$OUT/prefill.err | tail -1 | cut -d, -f10)
  row="$row | ${ms:-FAIL}"
done; echo "$row" | tee -a $OUT/prefill.txt
done
echo "== compute-sanitizer (warp-specialized paged prefill, B=3 H=4 HKV=2 N=600 M=700 D=128)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for c in "memcheck 16" "racecheck 16" "synccheck 16" "memcheck 64" "racecheck 64"; do set -- $c
  timeout 30 $CS --tool $1 $T/flash-run test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged $2 --shape B=3,H=4,HKV=2,N=600,M=700,D=128 --iters 0 > $OUT/san-$1-$2.log 2>&1
  echo "$1 page $2: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$1-$2.log | tail -1)"
done
