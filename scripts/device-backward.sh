#!/usr/bin/env bash
# One device call for the backward: the portable tools from $TOOLS, the
# backward check of every example (scripts/gpu-backward-check.sh),
# compute-sanitizer (memcheck, racecheck, synccheck) over the three
# backward kernels at a small shape, and bench/backward.sh (flashc beside
# the peers). Logs and tables go to $OUT; a summary is printed last.
#   TOOLS=.device-carry/flashc-tools.tar.xz OUT=out [PTX_DIR=dir] [BASE_TOOLS=old.tar.xz] scripts/device-backward.sh
# SANITIZER_RUNS, SANITIZER_SHAPE pick the sanitizer runs; SKIP_CHECK, SKIP_DETERMINISTIC, SKIP_SANITIZER, SKIP_CHOICES, SKIP_COST,
# SKIP_TILES, SKIP_TUNE, SKIP_BENCH, SKIP_TRAIN=1 leave a part out.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
tools=$(mktemp -d)
tar -C "$tools" -xJf "${TOOLS:-.device-carry/flashc-tools.tar.xz}" || exit 2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
export FLASHC_CACHE_DIR=$(mktemp -d)
# time_bwd CSV LABEL SHAPE FILE [ARGS...]: one flash-run --bwd row (validated,
# timed) with LABEL appended.
time_bwd() {
  local csv=$1 label=$2 shape=$3 file=$4; shift 4
  local line
  line=$("$tools/flash-run" "$file" --bwd --csv --shape "$shape" "$@" --iters 20 2>>"${csv%.csv}.log" | tail -1)
  echo "$line,$label" >> "$csv"
}
header="variant,dtype,B,H,HKV,N,M,D,layout,dir,ms,tflops,rel_dq,rel_dk,rel_dv"
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  FLASH_RUN=$tools/flash-run scripts/gpu-backward-check.sh > "$OUT/gpu-backward-check.log" 2>&1
fi
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    # SANITIZER_RUNS: ';'-separated flash-run arguments instead of these.
    IFS=';' read -ra runs <<< "${SANITIZER_RUNS:-examples/causal.flash;examples/relative_bias.flash;examples/relative_bias.flash --deterministic;examples/alibi.flash --deterministic;examples/relative_bias.flash --stage-aux-grads;examples/relative_bias.flash --deterministic --stage-aux-grads}"
    for run in "${runs[@]}"; do
      echo "== $tool $run" >> "$OUT/sanitizer.log"
      timeout 300 "$sanitizer" --tool $tool "$tools/flash-run" $run --bwd \
        --shape "${SANITIZER_SHAPE:-B=1,H=2,N=200,D=64}" --iters 0 >> "$OUT/sanitizer.log" 2>&1
      echo "exit $?" >> "$OUT/sanitizer.log"
    done
  done
fi
if [ "${SKIP_DETERMINISTIC:-0}" != 1 ]; then
  FLAGS=--deterministic FLASH_RUN=$tools/flash-run scripts/gpu-backward-check.sh \
    > "$OUT/gpu-backward-check-deterministic.log" 2>&1
fi
# SASS of the main kernels from the PTX flashc emitted on the build host
# ($PTX_DIR/*.ptx): HGMMA per kernel, local-memory spills (STL/LDL).
if [ -d "${PTX_DIR:-}" ]; then
  echo "| ptx | HGMMA | STL | LDL |" > "$OUT/sass.md"; echo "|---|---|---|---|" >> "$OUT/sass.md"
  for p in "$PTX_DIR"/*.ptx; do
    n=$(basename "$p" .ptx); /usr/local/cuda/bin/ptxas -arch=sm_90a "$p" -o "$OUT/$n.cubin" || continue
    main=$(grep -o '\.entry [a-z_0-9]*_bwd(' "$p" | head -1 | sed 's/.entry //; s/(//')
    /usr/local/cuda/bin/cuobjdump --dump-sass --function "$main" "$OUT/$n.cubin" > "$OUT/$n.sass" 2>&1
    echo "| $n ($main) | $(grep -c HGMMA "$OUT/$n.sass") | $(grep -c 'STL' "$OUT/$n.sass") | $(grep -c 'LDL' "$OUT/$n.sass") |" >> "$OUT/sass.md"
    rm -f "$OUT/$n.cubin" "$OUT/$n.sass"
  done
fi
# What the kernel choices buy: the wgmma default, wgmma at Br = 64 and the
# mma.sync kernel, same shapes, same run.
if [ "${SKIP_CHOICES:-0}" != 1 ]; then
  echo "$header,choice" > "$OUT/choices.csv"
  for D in 64 128; do
    H=$((2048 / D))
    for f in examples/full.flash examples/causal.flash; do
      for choice in "default" "--bwd-tile Br=64,Bc=128" "--bwd-tile Br=128,Bc=128" "--gemm=mma.sync"; do
        [ "$D" = 128 ] && [ "$choice" = "--bwd-tile Br=128,Bc=128" ] && continue
        args=(); [ "$choice" != default ] && args=($choice)
        time_bwd "$OUT/choices.csv" "$choice" "B=4,H=$H,N=4096,D=$D" "$f" "${args[@]}"
      done
    done
  done
fi
# What the deterministic mode costs (semaphore-ordered dQ, fixed-point aux
# gradients), same shapes, same run; flash-run checks bitwise equality.
if [ "${SKIP_COST:-0}" != 1 ]; then
  echo "$header,mode" > "$OUT/deterministic.csv"
  for D in 64 128; do
    H=$((2048 / D))
    for f in ${COST_VARIANTS:-examples/full.flash examples/causal.flash examples/alibi.flash examples/relative_bias.flash}; do
      for mode in default --deterministic --stage-aux-grads "--deterministic --stage-aux-grads"; do
        [[ "$mode" == *stage* && "$f" != *bias* ]] && continue
        args=(); [ "$mode" != default ] && args=($mode)
        time_bwd "$OUT/deterministic.csv" "$mode" "B=4,H=$H,N=4096,D=$D" "$f" "${args[@]}"
      done
    done
  done
fi
# Backward tiles at D = 64 beside the default (the tile rule's evidence).
if [ "${SKIP_TILES:-0}" != 1 ]; then
  echo "$header,tile" > "$OUT/tiles.csv"
  for f in examples/full.flash examples/causal.flash examples/alibi.flash examples/relative_bias.flash; do
    for tile in default Br=32,Bc=64 Br=32,Bc=128 Br=64,Bc=64; do
      args=(); [ "$tile" != default ] && args=(--bwd-tile "$tile")
      time_bwd "$OUT/tiles.csv" "$tile" "B=4,H=32,N=4096,D=64" "$f" "${args[@]}"
    done
  done
fi
# flashc-tune --bwd: every backward tile of the default space, validated and
# timed, the winner recorded in a scratch cache.
if [ "${SKIP_TUNE:-0}" != 1 ]; then
  for spec in "examples/causal.flash B=4,H=16,N=4096,D=128" "examples/full.flash B=4,H=32,N=4096,D=64" \
              "examples/alibi.flash B=4,H=16,N=4096,D=128"; do
    set -- $spec
    "$tools/flashc-tune" "$1" --bwd --shape "$2" --budget 100s --iters 10 \
      --tuning-cache "$OUT/tuning.json" > "$OUT/tune-$(basename "$1" .flash)-$(echo "$2" | tr "=," "__").txt" 2>>"$OUT/tune.log"
  done
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  FLASH_RUN=$tools/flash-run bench/backward.sh "$OUT/bench" > "$OUT/bench.log" 2>&1
fi
# The same grid with an earlier build's flash-run ($BASE_TOOLS), same run:
# what this build's changes bought.
if [ -n "${BASE_TOOLS:-}" ]; then
  base=$(mktemp -d); tar -C "$base" -xJf "$BASE_TOOLS" flash-run || exit 2
  echo "$header,build" > "$OUT/base.csv"
  for D in $(echo "${HDIMS:-64,128}" | tr , " "); do
    H=$((2048 / D))
    for N in $(echo "${SEQS:-1024,4096,16384}" | tr , " "); do
      B=$((16384 / N)); [ $B -lt 1 ] && B=1
      for f in examples/full.flash examples/causal.flash; do
        for build in base new; do
          run=$tools/flash-run; [ $build = base ] && run=$base/flash-run
          line=$("$run" "$f" --bwd --csv --shape "B=$B,H=$H,N=$N,D=$D" --iters 20 2>>"$OUT/base.log" | grep ',bwd,' | tail -1)
          echo "$line,$build" >> "$OUT/base.csv"
        done
      done
    done
  done
fi
# One training step (forward + backward) beside SDPA's pair.
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  PASS=train FLASH_RUN=$tools/flash-run bench/backward.sh "$OUT/train" > "$OUT/train.log" 2>&1
fi
echo "== $(cat "$OUT/gpu.txt")"
[ -f "$OUT/gpu-backward-check.log" ] && { grep -E "^FAIL" -A8 "$OUT/gpu-backward-check.log" | head -60; tail -1 "$OUT/gpu-backward-check.log"; }
[ -f "$OUT/gpu-backward-check-deterministic.log" ] && { grep -E "^FAIL" -A8 "$OUT/gpu-backward-check-deterministic.log" | head -30; echo "deterministic: $(tail -1 "$OUT/gpu-backward-check-deterministic.log")"; }
[ -f "$OUT/sass.md" ] && cat "$OUT/sass.md"
[ -f "$OUT/choices.csv" ] && cut -d, -f1,8,11,12,13,16 "$OUT/choices.csv"
[ -f "$OUT/tiles.csv" ] && cut -d, -f1,8,11,12,16 "$OUT/tiles.csv"
[ -f "$OUT/deterministic.csv" ] && cut -d, -f1,8,11,12,16 "$OUT/deterministic.csv"
[ -f "$OUT/base.csv" ] && cut -d, -f1,6,8,11,12,16 "$OUT/base.csv"
for t in "$OUT"/tune-*.txt; do [ -f "$t" ] && cat "$t"; done
[ -f "$OUT/sanitizer.log" ] && grep -E "^==|ERROR SUMMARY|exit|Error" "$OUT/sanitizer.log" | head -40
[ -f "$OUT/bench/table.md" ] && cat "$OUT/bench/table.md"
[ -f "$OUT/train/table-train.md" ] && cat "$OUT/train/table-train.md"
true
