#!/usr/bin/env bash
# Call V (issue 15): packed documents (20, B = 1, H = 16) with the new
# summary kernel (flash-run) and HEAD's (flash-run-base) beside Flex with a
# BlockMask on the same ids, every row checked first; then the summary
# alone by --csv (summary_ms) in alternating rounds. Tables last.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
echo "== checks at the timed shape (several rounds per query tile)"
for a in "B=1,H=2,N=20000,D=64 --tile Br=64,Bc=64" "B=1,H=2,N=20000,D=64" "B=2,H=2,N=9000,D=128 --tile Br=64,Bc=64"; do
  s=${a%% *}; rest=${a#"$s"}
  timeout 90 $T/flash-run examples/document.flash --shape $s --check-shape $s --docs 13 $rest --iters 0 > $T/c.log 2>&1 \
    && echo "ok   $a: $(grep -o 'block summary, [0-9]* tiles): GPU == interpreter  ok' $T/c.log)" || { echo "FAIL $a"; tail -5 $T/c.log; }
done
timeout 90 $T/flash-run examples/key_padding.flash --shape B=2,H=2,N=9000,D=128 --check-shape B=2,H=2,N=9000,D=128 --tile Br=64,Bc=64 --iters 0 > $T/c.log 2>&1 \
  && echo "ok   key_padding 9000: $(grep -o 'block summary, [0-9]* tiles): GPU == interpreter  ok' $T/c.log)" || { echo "FAIL key_padding"; tail -5 $T/c.log; }
OUT=$OUT/docs TOOLS="flash-run flash-run-base" GRIDS=default timeout 420 bash bench/documents.sh compare "64 128" "8192 16384 32768" \
  > $OUT/docs.log 2>&1
echo "docs exit $?; checks ok $(grep -c '^ok' $OUT/docs.log), FAIL $(grep -c '^FAIL' $OUT/docs.log)"
grep -E "^FAIL" -A5 $OUT/docs.log | head -20
echo "== tables"
cat $OUT/docs/docs.csv; cat $OUT/docs/flex.csv
