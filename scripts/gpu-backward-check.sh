#!/usr/bin/env bash
# On a GPU host: validate the backward pass of every example on the GPU
# against the CPU interpreter (flash-run --bwd: dQ, dK, dV and aux gradients
# from the same O, LSE and dO; ragged lengths, D = 64, 96, 128, 256, GQA/MQA,
# BSHD, f16; the backward block summary), no timing.
# FLASH_RUN=/path/to/flash-run (default: on PATH);
# HEAD_DIMS=256 (a comma list) keeps the cases of those head dims only;
# ONLY=pattern (grep -E) the cases whose arguments match.
# Prints one line per case and a closing "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
FLAGS=${FLAGS:-}
passed=0; failed=0; skipped=0
# HEAD_DIMS (default all): only the cases whose shape has one of these D.
HEAD_DIMS=${HEAD_DIMS:-}
# ONLY (a grep -E pattern): only the cases whose arguments match it.
ONLY=${ONLY:-}
run() {
  if [ -n "$ONLY" ] && ! echo "$*" | grep -qE -- "$ONLY"; then return 0; fi
  if [ -n "$HEAD_DIMS" ]; then
    local d; d=$(echo "$*" | grep -oE 'D=[0-9]+' | head -1 | cut -d= -f2)
    [[ " ${HEAD_DIMS//,/ } " == *" $d "* ]] || return 0
  fi
  local out
  out=$(timeout "${CASE_TIMEOUT:-120}" "$FLASH_RUN" "$@" --bwd $FLAGS --iters 0 2>&1); local rc=$?
  [ $rc -eq 124 ] && out="$out
timed out after ${CASE_TIMEOUT:-120} s"
  if [ $rc -eq 0 ]; then passed=$((passed+1)); echo "ok    $*"; echo "$out" | grep "(backward" | sed 's/^/      /';
  elif [ $rc -eq 3 ]; then skipped=$((skipped+1)); echo "skip  $* (no GPU)";
  else failed=$((failed+1)); echo "FAIL  $* (exit $rc)"; echo "$out" | sed 's/^/      /'; fi
}
for D in 64 128; do
  for f in examples/*.flash; do
    grep -qE '^ *(paged|varlen) ' "$f" && continue   # forward-only variants
    extra=""
    [[ $f == *gqa.flash ]] && extra=",H=8,HKV=2,M=1100"
    run "$f" --shape "B=2,H=4,N=1000,D=$D$extra"
  done
done
# D = 64 above N = 1024: the default 128 x 128 tile (dQ in key-block order
# on full and prefix masks), every example, ragged; BSHD, f16, GQA.
for f in examples/*.flash; do
  grep -qE '^ *(paged|varlen) ' "$f" && continue
  extra=""
  [[ $f == *gqa.flash ]] && extra=",H=8,HKV=2,M=1400"
  run "$f" --shape "B=1,H=2,N=1500,D=64$extra"
done
run examples/causal.flash --shape B=2,H=4,N=1300,D=64 --layout bshd
run test/GPU/dtypes.flash --variant causal_f16 --shape B=1,H=8,HKV=2,N=1300,M=1500,D=64
run examples/full.flash --shape B=1,H=2,N=2049,D=64
run examples/causal.flash --shape B=1,H=2,N=1300,D=64 --deterministic
run examples/causal.flash --shape B=1,H=2,N=777,D=96
run examples/full.flash --shape B=1,H=2,N=333,D=96
run examples/full.flash --shape B=2,H=8,HKV=1,N=515,M=700,D=128     # MQA, M > N
run examples/full.flash --shape B=1,H=4,HKV=2,N=700,M=300,D=64      # M < N
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --layout bshd
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1000,D=64 --layout bshd
run examples/relative_bias.flash --shape B=1,H=4,N=257,D=64               # ragged N
run test/GPU/dtypes.flash --variant causal_f16 --shape B=2,H=8,HKV=2,N=1000,M=1200,D=128
run test/GPU/dtypes.flash --variant softcap_window_f16 --shape B=2,H=4,N=1000,D=64 --layout bshd
run test/GPU/past-rows.flash --shape B=1,H=2,N=1000,D=128            # a score +inf/NaN past N
run test/GPU/past-rows.flash --shape B=1,H=2,N=1000,D=64
run examples/full.flash --shape B=1,H=2,N=1,D=64                     # one row
run examples/causal.flash --shape B=1,H=1,N=17,D=128                 # one partial tile
run examples/causal.flash --shape B=1,H=2,N=700,D=64 --gemm=mma.sync --tile Br=32,Bc=64
run examples/alibi.flash --shape B=1,H=2,N=700,D=128 --tile Br=64,Bc=128
# The wgmma kernel's other tiles (sm_90a): one warpgroup, Br = 128, three
# warpgroups, and the mma.sync kernel it replaced.
run examples/causal.flash --shape B=1,H=2,N=700,D=64 --tile Br=64,Bc=64
run examples/sliding_window.flash --shape B=1,H=2,N=700,D=64 --tile Br=128,Bc=128
run examples/full.flash --shape B=1,H=2,N=700,M=650,D=64 --tile Br=64,Bc=192
run examples/relative_bias.flash --shape B=1,H=2,N=300,D=96 --tile Br=64,Bc=128
run examples/causal.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync
# Aux gradients: a dense bias (no tile's range fits the staging: direct
# adds; at N = 8 it fits), two staged tables at once.
run test/GPU/aux-grads.flash --variant dense_bias --shape B=1,H=2,N=300,D=64
run test/GPU/aux-grads.flash --variant dense_bias --shape B=2,H=2,N=8,D=64
run test/GPU/aux-grads.flash --variant two_tables --shape B=2,H=4,N=500,D=128
run test/GPU/aux-grads.flash --variant two_tables --shape B=1,H=2,N=333,D=64 --gemm=mma.sync
# The same with the aux gradient adds staged per tile in shared memory
# (--stage-aux-grads, experimental until these pass on a GPU).
run examples/relative_bias.flash --shape B=2,H=4,N=1000,D=64 --stage-aux-grads
run examples/relative_bias.flash --shape B=1,H=2,N=300,D=128 --stage-aux-grads
run test/GPU/aux-grads.flash --variant dense_bias --shape B=1,H=2,N=300,D=64 --stage-aux-grads
run test/GPU/aux-grads.flash --variant dense_bias --shape B=2,H=2,N=8,D=64 --stage-aux-grads
run test/GPU/aux-grads.flash --variant two_tables --shape B=2,H=4,N=500,D=128 --stage-aux-grads
run test/GPU/aux-grads.flash --variant two_tables --shape B=1,H=2,N=333,D=64 --gemm=mma.sync --stage-aux-grads
# D = 256: the main kernel splits D into two column slices (one CTA each);
# every example, ragged and GQA shapes, BSHD, the mma.sync kernel, the
# deterministic mode (3 runs bitwise the same), aux gradients added by
# slice 0 only (direct, uniform, staged).
for f in examples/*.flash; do
  grep -qE '^ *(paged|varlen) ' "$f" && continue
  extra=""
  [[ $f == *gqa.flash ]] && extra=",H=8,HKV=2,M=1100"
  run "$f" --shape "B=2,H=4,N=1000,D=256$extra"
done
run examples/causal.flash --shape B=1,H=2,N=333,M=333,D=256 --layout bshd
run examples/full.flash --shape B=1,H=4,HKV=1,N=515,M=700,D=256        # MQA, M > N
run examples/causal.flash --shape B=1,H=2,N=700,D=256 --gemm=mma.sync
run examples/alibi.flash --shape B=1,H=2,N=700,D=256 --gemm=mma.sync
run examples/causal.flash --shape B=1,H=2,N=1000,D=256 --deterministic
run examples/relative_bias.flash --shape B=1,H=2,N=300,D=256 --deterministic
run examples/relative_bias.flash --shape B=1,H=2,N=300,D=256 --stage-aux-grads
run test/GPU/aux-grads.flash --variant two_tables --shape B=1,H=2,N=333,D=256
# --bwd-block-summary (the default; named so ONLY= finds them): the
# backward reads a summary of its own tiling (flash-run also compares the
# GPU's bytes with the interpreter's) and walks the visible query tiles;
# N = 4000 gives 125 tiles of 32, four ballot steps per walk. Every
# kernel: wgmma at D = 64, 128 and 256 (column slices), mma.sync, the
# deterministic mode (no walk: its skipped tiles wait for their turn and
# pass it on), BSHD, a per-head summary under GQA.
for D in 64 128 256; do
  run examples/document.flash --shape "B=2,H=4,N=1000,D=$D" --bwd-block-summary
  run examples/key_padding.flash --shape "B=2,H=4,N=1000,D=$D" --bwd-block-summary
done
run examples/document.flash --shape B=1,H=2,N=4000,D=128 --bwd-block-summary
run examples/document.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync --bwd-block-summary
run examples/key_padding.flash --shape B=2,H=2,N=777,D=64 --gemm=mma.sync --bwd-block-summary
run examples/document.flash --shape B=2,H=4,N=1000,D=128 --deterministic --bwd-block-summary
run examples/document.flash --shape B=2,H=4,N=1000,D=64 --layout bshd --bwd-block-summary
run test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1000,D=128 --bwd-block-summary
run test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=1,H=4,HKV=1,N=515,D=64 --bwd-block-summary
run test/GPU/summary-masks.flash --variant padded_window --shape B=3,H=2,N=1500,D=128 --bwd-block-summary
# --deterministic: a tile waits for the nearest later key block that sees
# it (a ballot over 32 key blocks' facts at a time), a skipped tile for
# nothing. Sinks + window leave a gap between the visible key blocks;
# N = 5000 takes two ballots per search; facts of the query head (the GQA loop's) search
# too; a summary's facts still wait and pass on skipped tiles; mma.sync
# keeps per-element adds.
run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=64 --param window=300 --deterministic
run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=128 --param window=300 --deterministic
run examples/causal.flash --shape B=1,H=2,N=5000,D=64 --deterministic
run examples/sliding_window.flash --shape B=2,H=4,N=1000,D=128 --deterministic
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128 --deterministic
run examples/document.flash --shape B=1,H=4,N=3000,D=128 --bwd-block-summary=false --deterministic
run examples/document.flash --shape B=1,H=4,N=3000,D=128 --bwd-block-summary --deterministic
run test/GPU/head-dependent-mask.flash --shape B=2,H=8,HKV=2,N=1000,D=128 --deterministic
run test/GPU/head-dependent-mask.flash --shape B=1,H=4,HKV=1,N=3000,D=64 --deterministic
run examples/sliding_window.flash --shape B=2,H=4,N=2000,D=64 --gemm=mma.sync --deterministic
# --defer-turns (experimental, --dq-writer=false): a tile's turn passes on at the next tile's
# first dK/dV product, at the kernel's end, or before a skipped tile of the
# wait-and-pass scheme waits; dense, a gap between pieces, two ballots,
# skipped tiles that wait and pass, column slices.
for D in 64 128; do
  run examples/full.flash --shape "B=2,H=4,N=1000,D=$D" --deterministic --defer-turns
  run examples/causal.flash --shape "B=1,H=2,N=5000,D=$D" --deterministic --defer-turns
  run examples/sink_window.flash --shape "B=1,H=4,HKV=2,N=3000,D=$D" --param window=300 --deterministic --defer-turns
  run examples/document.flash --shape "B=1,H=4,N=3000,D=$D" --deterministic --defer-turns
done
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128 --deterministic --defer-turns
run examples/causal.flash --shape B=1,H=2,N=777,D=256 --deterministic --defer-turns
# --dq-writer (the deterministic default at D >= 96): a warpgroup beside the body's two whose warp
# adds the staged dQ tiles (setmaxnreg 24 / 240, named barriers 1-3), with
# and without --deterministic; one partial tile, GQA, skipped tiles that
# wait and pass, column slices, a tile the writer never sees (N = 1).
for det in "" --deterministic; do
  run examples/full.flash --shape B=2,H=4,N=1000,D=128 --dq-writer $det
  run examples/causal.flash --shape B=1,H=2,N=5000,D=128 --dq-writer $det
  run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=128 --param window=300 --dq-writer $det
  run examples/document.flash --shape B=1,H=4,N=3000,D=128 --dq-writer $det
  run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=96 --dq-writer $det
  run examples/causal.flash --shape B=1,H=2,N=777,D=256 --dq-writer $det
  run examples/relative_bias.flash --shape B=1,H=2,N=300,D=128 --dq-writer $det
done
run examples/full.flash --shape B=2,H=2,N=1,M=700,D=128 --dq-writer
# The deterministic body's own adds (what --deterministic took before the
# writer became its default at D >= 96).
run examples/full.flash --shape B=2,H=4,N=1000,D=128 --deterministic --dq-writer=false
run examples/causal.flash --shape B=1,H=2,N=5000,D=128 --deterministic --dq-writer=false
run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=128 --param window=300 --deterministic --dq-writer=false
# --bwd-rotate-tiles (experimental): each key block's walk starts at its
# own query tile and wraps; dense, causal (the walk starts at the
# diagonal), a window, GQA, M < N, D = 64/256, a classified mask's skipped
# tiles, aux gradients, the writer.
for D in 64 128; do
  for f in full causal sliding_window prefix_lm alibi; do
    run examples/$f.flash --shape "B=2,H=4,N=1000,D=$D" --bwd-rotate-tiles
  done
done
run examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128 --bwd-rotate-tiles
run examples/full.flash --shape B=1,H=4,HKV=2,N=700,M=300,D=64 --bwd-rotate-tiles
run examples/causal.flash --shape B=1,H=2,N=777,D=256 --bwd-rotate-tiles
run examples/sink_window.flash --shape B=1,H=4,HKV=2,N=3000,D=128 --param window=300 --bwd-rotate-tiles
run examples/full.flash --shape B=2,H=4,N=1000,D=128 --dq-writer --bwd-rotate-tiles
run test/GPU/aux-grads.flash --variant two_tables --shape B=2,H=4,N=500,D=128 --bwd-rotate-tiles
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
