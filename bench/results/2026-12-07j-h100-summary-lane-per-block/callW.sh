#!/usr/bin/env bash
# Call W (issue 15): HEAD's summary kernel (a key block per warp) with the
# tail changes (no arrival atomic for a one-CTA tile; the sort's held bins;
# 40 registers) beside 3c87fad (flash-run-base). Checks at the timed shape
# (one CTA per tile with 1024 tiles: held bins and the loop past them;
# several CTAs per tile), then documents (20, B = 1, H = 16) at 16k in
# alternating rounds: ms, summary_ms, cached_ms.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
echo "== checks at the timed shape"
for a in "B=32,H=1,N=2048,D=64 --docs 8" "B=1,H=2,N=20000,D=64 --docs 13" "B=2,H=2,N=9000,D=128 --docs 13"; do
  s=${a%% *}; rest=${a#"$s"}
  timeout 60 $T/flash-run examples/document.flash --shape $s --check-shape $s $rest --iters 0 > $T/c.log 2>&1 \
    && echo "ok   $a: $(grep -o 'block summary, [0-9]* tiles): GPU == interpreter  ok' $T/c.log)" || { echo "FAIL $a"; tail -5 $T/c.log; }
done
echo "== documents, 20 docs, B=1 H=16: tool,round,D,N,ms,summary_ms,cached_ms"
for round in 1 2; do for D in 64 128; do for N in 16384; do for tool in flash-run flash-run-base; do
  row=$(timeout 40 $T/$tool examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 20 --seed 7 --iters 30 --csv 2>/dev/null | tail -1)
  echo "$tool,$round,$D,$N,$(echo $row | cut -d, -f10),$(echo $row | cut -d, -f14,15)"
done; done; done; done | tee $OUT/rounds.csv
