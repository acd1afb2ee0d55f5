#!/usr/bin/env bash
# On a GPU host: validate every example on the GPU against the CPU
# interpreter (ragged lengths, several head dims, GQA, BSHD), no timing.
# Needs flash-run on PATH or FLASH_RUN=/path/to/flash-run. Every case runs
# once per GEMM kind in GEMMS (default "auto mma.sync": on an sm_90a GPU
# auto is the wgmma kernel, so both backends are checked).
# Prints one line per case and a closing "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
GEMMS=${GEMMS:-auto mma.sync}
# FLAGS: extra flash-run flags for every case (e.g. --warp-specialize).
FLAGS=${FLAGS:-}
# SECTIONS: which parts run, comma-separated (default main,split-keys,packed,paged,varlen).
SECTIONS=${SECTIONS:-main,split-keys,packed,paged,varlen}
wants() { case ",$SECTIONS," in *",$1,"*) return 0 ;; esac; return 1; }
passed=0; failed=0; skipped=0
run() {
  local out
  # A kernel that hangs (a barrier phase that never completes) fails its
  # case instead of stalling the whole check.
  out=$(timeout "${CASE_TIMEOUT:-60}" "$FLASH_RUN" "$@" --gemm "$gemm" $FLAGS --iters 0 2>&1); local rc=$?
  [ $rc -eq 124 ] && out="$out
timed out after ${CASE_TIMEOUT:-60} s"
  if [ $rc -eq 0 ]; then passed=$((passed+1)); echo "ok    $gemm $*";
  elif [ $rc -eq 3 ]; then skipped=$((skipped+1)); echo "skip  $gemm $* (no GPU)";
  else failed=$((failed+1)); echo "FAIL  $gemm $* (exit $rc)"; echo "$out" | sed 's/^/      /'; fi
}
if wants main; then
for gemm in $GEMMS; do
for D in 64 128; do
  for f in examples/*.flash; do
    extra=""
    [[ $f == *gqa.flash ]] && extra=",H=8,HKV=2,M=1100"
    run "$f" --shape "B=2,H=4,N=1000,D=$D$extra"
  done
done
for D in 96 256; do
  run examples/causal.flash --shape "B=1,H=2,N=777,D=$D"
  run examples/full.flash --shape "B=1,H=2,N=333,D=$D"
done
run examples/full.flash --shape B=2,H=8,HKV=1,N=515,M=700,D=128     # MQA, M > N
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --layout bshd
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1000,D=64 --layout bshd
run test/GPU/dtypes.flash --variant causal_f16 --shape B=2,H=8,HKV=2,N=1000,M=1200,D=128
run test/GPU/dtypes.flash --variant softcap_window_f16 --shape B=2,H=4,N=1000,D=64 --layout bshd
run examples/full.flash --shape B=1,H=2,N=1,D=64                     # one row
run examples/causal.flash --shape B=1,H=1,N=17,D=128                 # one partial tile
done
# Tiles other than the defaults (auto: wgmma on sm_90a).
gemm=auto
run examples/causal.flash --shape B=1,H=2,N=700,D=128 --tile Br=64,Bc=64
run examples/sliding_window.flash --shape B=1,H=2,N=700,D=64 --tile Br=192,Bc=32
run examples/alibi.flash --shape B=1,H=2,N=700,D=256 --tile Br=64,Bc=128
# The wgmma kernel with cp.async K/V copies instead of TMA.
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --kv-copy cp.async
run examples/document.flash --shape B=2,H=4,N=1000,D=64 --kv-copy cp.async --layout bshd
run examples/full.flash --shape B=1,H=2,N=333,D=96 --kv-copy cp.async
# The overlapped loop, alone and with a producer warpgroup (1-3 consumer
# warpgroups).
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --overlap-softmax
run examples/document.flash --shape B=2,H=4,N=1000,D=64 --overlap-softmax --layout bshd
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --warp-specialize=on --tile Br=128,Bc=128
run examples/full.flash --shape B=2,H=4,N=1000,D=256 --warp-specialize=on --tile Br=128,Bc=64
run examples/sliding_window.flash --shape B=1,H=2,N=700,D=64 --warp-specialize=on --tile Br=192,Bc=64
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1000,D=128 --warp-specialize=on --tile Br=64,Bc=64
run examples/full.flash --shape B=1,H=2,N=17,D=64 --warp-specialize=on --tile Br=128,Bc=64
# The persistent grid (the default of the warp-specialized tiles when N <=
# 8192, here 128x128 at N = 1100) for every example; then more tiles than CTAs, so each CTA runs several
# and the rings' phases carry over; and the one-tile-per-CTA
# warp-specialized grid it replaced.
for f in examples/*.flash; do
  extra=""
  [[ $f == *gqa.flash ]] && extra=",H=4,HKV=2,M=1200"
  run "$f" --shape "B=1,H=2,N=1100,D=128$extra"
done
run examples/causal.flash --shape B=4,H=16,N=300,D=128 --tile Br=128,Bc=128
run examples/sliding_window.flash --shape B=8,H=16,N=256,D=128 --tile Br=128,Bc=128 --layout bshd
run examples/gqa.flash --shape B=4,H=16,HKV=4,N=300,M=520,D=128 --tile Br=128,Bc=128
run examples/full.flash --shape B=4,H=16,N=300,D=256
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --tile Br=128,Bc=128 --persistent=false
run examples/full.flash --shape B=1,H=2,N=333,D=256 --persistent=false
# Masks whose keys come in pieces walk their visible blocks only: one
# warpgroup (D = 64, also overlapped), warp-specialized on the persistent
# grid and not, D = 256, mma.sync; GQA, M != N, BSHD, no visible key at all.
for gemm in auto mma.sync; do
  for D in 64 128; do
    run test/GPU/pieces.flash --variant two_windows --shape "B=2,H=4,HKV=2,N=1000,M=1300,D=$D"
    run test/GPU/pieces.flash --variant sink_beside_future --shape "B=1,H=4,HKV=1,N=1500,M=1200,D=$D"
    run test/GPU/pieces.flash --variant anti_window --shape "B=2,H=2,N=900,D=$D"
    run test/GPU/pieces.flash --variant nothing_visible --shape "B=1,H=2,N=700,D=$D"
  done
done
gemm=auto
run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,M=3000,D=128 --persistent=false
run examples/sink_window.flash --shape B=4,H=16,HKV=4,N=300,M=300,D=128 --tile Br=128,Bc=128
run examples/sink_window.flash --shape B=2,H=4,HKV=4,N=1000,M=1000,D=64 --overlap-softmax --layout bshd
run examples/sink_window.flash --shape B=1,H=2,HKV=2,N=700,M=700,D=256
run test/GPU/pieces.flash --variant two_windows --shape B=1,H=2,HKV=2,N=1500,M=1500,D=256 --persistent=false
fi
if wants split-keys; then
# Split keys (decode by default: N <= 16): splits chosen by the launch and
# forced (more splits than key blocks leave some empty), GQA groups, D =
# 64-256, N > 1 (speculative decoding, causal within), prefill tiles with
# splits (warp-specialized, masks that read aux tensors, walks over keys in
# pieces), f16, BSHD; both GEMM kinds.
for gemm in auto mma.sync; do
  for D in 64 96 128 256; do
    run examples/gqa.flash --shape "B=3,H=8,HKV=2,N=1,M=3000,D=$D"
  done
  run examples/gqa.flash --shape B=2,H=8,HKV=2,N=5,M=2000,D=128 --splits 7
  run examples/gqa.flash --shape B=1,H=4,HKV=1,N=1,M=300,D=128 --splits 40
  run examples/gqa.flash --shape B=2,H=16,HKV=16,N=1,M=777,D=128 --splits 3 --layout bshd
  run examples/causal.flash --split-keys --shape B=2,H=4,N=1000,D=128 --splits 3
  run examples/document.flash --split-keys --shape B=2,H=4,N=1000,D=64 --splits 4
  run examples/key_padding.flash --split-keys --shape B=3,H=4,N=4,M=900,D=128 --splits 5
  run examples/sink_window.flash --split-keys --shape B=1,H=4,N=1500,D=128 --splits 2
  run test/GPU/dtypes.flash --variant causal_f16 --split-keys --shape B=2,H=8,HKV=2,N=9,M=1200,D=128 --splits 6
done
gemm=auto
fi
if wants packed; then
# Packed GQA (the decode default of GQA variants): groups of 4, 8 and 16
# (MQA), N = 1-16 (G·N rows crossing tiles), a score and a mask that read
# h and i, masks that read aux tensors, D = 64-256, f16, BSHD, with and
# without splits; both GEMM kinds.
for gemm in auto mma.sync; do
  run test/GPU/gqa_per_head.flash --pack-gqa --shape B=2,H=8,HKV=2,N=7,M=700,D=128 --splits 3
  run examples/gqa.flash --shape B=2,H=32,HKV=4,N=3,M=2000,D=128
  run examples/gqa.flash --shape B=1,H=16,HKV=1,N=16,M=1500,D=64
  run examples/sliding_window.flash --pack-gqa --shape B=2,H=8,HKV=2,N=5,M=900,D=128 --splits 2
  run examples/key_padding.flash --pack-gqa --shape B=3,H=8,HKV=2,N=2,M=900,D=128 --splits 4
  run examples/sink_window.flash --pack-gqa --shape B=1,H=12,HKV=3,N=4,M=2000,D=256
  run examples/gqa.flash --pack-gqa --shape B=2,H=8,HKV=2,N=5,M=1000,D=128 --layout bshd --splits 2
  run test/GPU/dtypes.flash --variant causal_f16 --pack-gqa --shape B=2,H=8,HKV=2,N=9,M=1200,D=96
done
gemm=auto
fi
if wants paged; then
# A paged K/V cache: shuffled pages, sequences of M, 1, 0 and random keys
# (B >= 3), table entries past a sequence outside the cache, NaN in every
# row no sequence owns; pages below, equal to, not dividing and above the
# key block (wgmma: TMA boxes per page with the last block gathered, or the
# gather alone for pages 1 and 48 and with --kv-copy cp.async); decode
# (packed, split) and prefill (warp-specialized too); masks and score mods that read M, h, i and
# aux tensors; D = 64-256, f16, BSHD q; both GEMM kinds.
for gemm in auto mma.sync; do
  for page in 1 16 48 64 256; do
    run test/Driver/Inputs/paged-no-page.flash --paged $page --shape B=6,H=32,HKV=8,N=1,M=3000,D=128 --splits 3
  done
  run examples/paged_decode.flash --shape B=5,H=8,HKV=2,N=4,M=2000,D=64
  run examples/paged_decode.flash --shape B=4,H=16,HKV=2,N=16,M=5000,D=256 --splits 5
  run examples/paged_decode.flash --shape B=3,H=4,HKV=4,N=700,M=1500,D=128 --layout bshd
  run test/Driver/Inputs/paged-no-page.flash --paged 32 --shape B=4,H=8,HKV=2,N=2,M=1000,D=96
  for v in window softcap_alibi documents full; do
    run test/Driver/Inputs/paged-masks.flash --variant $v --paged 16 --shape B=4,H=8,HKV=2,N=3,M=1200,D=128
  done
  run test/Driver/Inputs/paged-masks.flash --variant window --paged 128 --shape B=3,H=4,HKV=2,N=500,M=900,D=64
  run test/Driver/Inputs/paged-no-page.flash --paged 64 --shape B=4,H=8,HKV=2,N=600,M=1700,D=128
  run test/Driver/Inputs/paged-no-page.flash --paged 16 --kv-copy cp.async --shape B=6,H=32,HKV=8,N=1,M=3000,D=128 --splits 3
  # Warp-specialized prefill (wgmma, D = 128, N > 512, the default where
  # the blocks come by TMA): the producer warpgroup gathers the block a
  # sequence ends in; pages below, at and above Bc = 128, and Bc = 96 for
  # variants that read aux tensors; --warp-specialize=on on the one-
  # warpgroup tile (one consumer); off keeps the one-warpgroup kernel.
  # (mma.sync ignores the flag.)
  for page in 16 32 128 256; do
    run test/Driver/Inputs/paged-no-page.flash --paged $page --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
  done
  for v in window softcap_alibi documents; do
    run test/Driver/Inputs/paged-masks.flash --variant $v --paged 32 --shape B=4,H=8,HKV=2,N=800,M=1500,D=128
  done
  run test/Driver/Inputs/paged-no-page.flash --warp-specialize=on --paged 16 --shape B=3,H=8,HKV=2,N=700,M=1300,D=64
  run test/Driver/Inputs/paged-no-page.flash --warp-specialize=off --paged 16 --shape B=4,H=8,HKV=2,N=900,M=1700,D=128
  # --paged-last-block=tma: one-warpgroup kernels (prefill at D = 64 and
  # 256, decode, split decode, masks) copy the block a sequence ends in by
  # TMA and zero its rows past the end.
  for page in 16 64 256; do
    run test/Driver/Inputs/paged-no-page.flash --paged-last-block=tma --paged $page --shape B=4,H=8,HKV=2,N=700,M=1700,D=64
  done
  run test/Driver/Inputs/paged-no-page.flash --paged-last-block=tma --paged 16 --shape B=3,H=4,HKV=2,N=300,M=1000,D=256
  run test/Driver/Inputs/paged-no-page.flash --paged-last-block=tma --paged 32 --shape B=6,H=32,HKV=8,N=1,M=3000,D=128 --splits 3
  run examples/paged_decode.flash --paged-last-block=tma --shape B=5,H=8,HKV=2,N=4,M=2000,D=64
  for v in window softcap_alibi documents; do
    run test/Driver/Inputs/paged-masks.flash --paged-last-block=tma --variant $v --paged 16 --shape B=4,H=8,HKV=2,N=3,M=1200,D=128
  done
  run test/Driver/Inputs/chunked-prefill.flash --paged-last-block=tma --shape B=5,H=16,HKV=2,N=64,M=700,D=64
  run test/Driver/Inputs/paged-no-page.flash --paged-last-block=tma --warp-specialize=off --tile Br=128,Bc=128 --paged 16 --shape B=3,H=8,HKV=2,N=700,M=1300,D=128
done
gemm=auto
fi
if wants varlen; then
# A varlen batch: packed token-major sequences of full, 1, 0 and random
# lengths from row 5 (the persistent grid, and one CTA per tile) (NaN in the rows no sequence owns, and a stray store
# into one fails), GQA and MHA, D = 64-256, f16, masks and score mods that
# read N, M, h, i and aux tensors; keys alone packed (split, packed GQA at
# decode); packed chunks over a paged cache (chunked prefill); both GEMMs.
for gemm in auto mma.sync; do
  run examples/varlen.flash --shape B=6,H=8,HKV=2,N=1000,D=128
  run examples/varlen.flash --shape B=6,H=8,HKV=2,N=1000,D=128 --persistent=false
  run examples/varlen.flash --shape B=5,H=4,HKV=4,N=333,D=64
  run examples/varlen.flash --shape B=4,H=4,HKV=1,N=517,D=256
  run test/Driver/Inputs/varlen-masks.flash --variant causal_gqa --shape B=5,H=8,HKV=2,N=700,D=128
  for v in window_cross softcap_alibi documents queries_only; do
    run test/Driver/Inputs/varlen-masks.flash --variant $v --shape B=5,H=8,HKV=2,N=700,M=900,D=128
  done
  run test/Driver/Inputs/varlen-masks.flash --variant keys_only --shape B=6,H=32,HKV=8,N=1,M=3000,D=128 --splits 3
  run test/Driver/Inputs/varlen-masks.flash --variant window_cross --shape B=5,H=4,HKV=2,N=1,M=2000,D=96
  run test/Driver/Inputs/chunked-prefill.flash --shape B=6,H=8,HKV=2,N=300,M=2000,D=128
  run test/Driver/Inputs/chunked-prefill.flash --shape B=5,H=16,HKV=2,N=64,M=700,D=64
  # Long chunks: the warp-specialized tile over the paged cache.
  run test/Driver/Inputs/chunked-prefill.flash --shape B=4,H=8,HKV=2,N=1500,M=3000,D=128
done
gemm=auto
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ] || exit 1
# Nothing ran: no GPU here. Exit 3 so ctest reports the check as skipped.
[ $passed -eq 0 ] && [ $skipped -gt 0 ] && exit 3
exit 0
