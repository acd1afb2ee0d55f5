#!/usr/bin/env bash
# Proves that a change left the emitted kernels alone: every example (and
# test/GPU/dtypes.flash) at D = 64, 96, 128, 256 on sm_90a and sm_80, at the
# query lengths where the default kernel changes (none given, 512, 1024,
# 4096, 16384) and under the flags that pick other kernels, and their
# backward kernels (plain, deterministic, mma.sync, staged aux gradients,
# another tile), compiled to PTX and to a kernel package (PTX plus launch
# metadata). Each case's output,
# stderr and exit code land in one file per case.
#
#   scripts/ptx-identity.sh snapshot DIR     write every case into DIR
#   scripts/ptx-identity.sh check DIR        compile again, compare byte for byte
#   scripts/ptx-identity.sh against REV      build REV in build-rev/ (ccache
#                                            helps), snapshot both, compare
#
# FLASHC=path/to/flashc (default build/bin/flashc). Exit 0 when identical;
# check prints the cases that differ and "N identical, N differ".
set -uo pipefail
cd "$(dirname "$0")/.."
FLASHC=${FLASHC:-$PWD/build/bin/flashc}
JOBS=${JOBS:-2}

# One case per line: name|flashc arguments (after the input file).
cases() {
  local files=(examples/*.flash test/GPU/dtypes.flash)
  for f in "${files[@]}"; do
    local base; base=$(basename "$f" .flash)
    for D in 64 96 128 256; do
      for arch in sm_90a sm_80; do
        echo "$base.$arch.D$D.ptx|$f --emit=ptx --arch=$arch --shape D=$D"
        echo "$base.$arch.D$D.pkg|$f --emit=package --arch=$arch --shape D=$D --variant=FIRST"
      done
      for N in 512 1024 4096 16384; do
        echo "$base.sm_90a.D$D.N$N.ptx|$f --emit=ptx --shape D=$D,N=$N"
      done
      echo "$base.sm_90a.D$D.N4096.pkg|$f --emit=package --shape D=$D,N=4096 --variant=FIRST"
      for flags in "--warp-specialize=off" "--warp-specialize=off --overlap-softmax" \
                   "--kv-copy=cp.async" "--gemm=mma.sync" "--ping-pong=false" \
                   "--persistent=false" "--persistent=true" "--warp-specialize=on" \
                   "--tile Br=64,Bc=64" "--tile Br=192,Bc=64"; do
        local tag; tag=$(echo "$flags" | tr -c 'a-zA-Z0-9\n' '_')
        echo "$base.sm_90a.D$D$tag.ptx|$f --emit=ptx --shape D=$D $flags"
      done
      for rpw in 16 32; do
        echo "$base.sm_80.D$D.rpw$rpw.ptx|$f --emit=ptx --arch=sm_80 --shape D=$D --rows-per-warp=$rpw"
      done
      echo "$base.sm_80.D$D.Br64.ptx|$f --emit=ptx --arch=sm_80 --shape D=$D --tile Br=64,Bc=64"
      # The backward (not of paged caches or varlen batches, which have none).
      grep -qE '^ *(paged|varlen) ' "$f" && continue
      for arch in sm_90a sm_80; do
        echo "$base.bwd.$arch.D$D.ptx|$f --bwd --emit=ptx --arch=$arch --shape D=$D"
        echo "$base.bwd.$arch.D$D.det.ptx|$f --bwd --deterministic --emit=ptx --arch=$arch --shape D=$D"
        echo "$base.bwd.$arch.D$D.pkg|$f --bwd --emit=package --arch=$arch --shape D=$D --variant=FIRST"
      done
      for flags in "--gemm=mma.sync" "--stage-aux-grads" "--bwd-tile Br=64,Bc=128"; do
        local tag; tag=$(echo "$flags" | tr -c 'a-zA-Z0-9\n' '_')
        echo "$base.bwd.sm_90a.D$D$tag.ptx|$f --bwd --emit=ptx --shape D=$D $flags"
      done
    done
  done
}

# Runs one case into DIR/name: stdout, then stderr, then the exit code.
run_case() {
  local dir=$1 line=$2
  local name=${line%%|*} args=${line#*|}
  local file=${args%% *}
  if [[ $args == *--variant=FIRST* ]]; then
    # A package holds one variant: the file's first.
    local first; first=$(grep -oP '^\s*attention\s+\K\w+' "$file" | head -1)
    args=${args/--variant=FIRST/--variant=$first}
  fi
  # shellcheck disable=SC2086
  {
    "$FLASHC" $args --no-tuning-cache -o - 2>"$dir/$name.stderr"
    echo "exit $?"
  } >"$dir/$name" 2>&1
  cat "$dir/$name.stderr" >>"$dir/$name"
  rm -f "$dir/$name.stderr"
}
export -f run_case
export FLASHC

snapshot() {
  local dir=$1
  mkdir -p "$dir"
  [ -x "$FLASHC" ] || { echo "ptx-identity: no flashc at $FLASHC" >&2; exit 2; }
  local total; total=$(cases | wc -l)
  echo "ptx-identity: $total cases with $FLASHC into $dir" >&2
  cases | xargs -d '\n' -P "$JOBS" -I{} bash -c 'run_case "$0" "$1"' "$dir" {}
}

compare() {
  local expected=$1 actual=$2 same=0 differ=0
  while IFS= read -r line; do
    local name=${line%%|*}
    if cmp -s "$expected/$name" "$actual/$name"; then
      same=$((same + 1))
    else
      differ=$((differ + 1))
      echo "DIFFERS  $name  (${line#*|})"
      diff "$expected/$name" "$actual/$name" 2>&1 | head -8 | sed 's/^/    /'
    fi
  done < <(cases)
  echo "ptx-identity: $same identical, $differ differ"
  [ "$differ" -eq 0 ]
}

case "${1:-}" in
  snapshot)
    [ $# -eq 2 ] || { echo "usage: $0 snapshot DIR" >&2; exit 2; }
    snapshot "$2" ;;
  check)
    [ $# -eq 2 ] || { echo "usage: $0 check DIR" >&2; exit 2; }
    [ -d "$2" ] || { echo "ptx-identity: no snapshot at $2" >&2; exit 2; }
    fresh=$(mktemp -d)
    snapshot "$fresh"
    compare "$2" "$fresh"; status=$?
    rm -rf "$fresh"
    exit $status ;;
  against)
    [ $# -eq 2 ] || { echo "usage: $0 against REV" >&2; exit 2; }
    rev=$2 tree=$PWD/build-rev/src
    rm -rf "$tree"; mkdir -p "$tree"
    git archive "$rev" | tar -x -C "$tree" || exit 2
    cmake -G Ninja -S "$tree" -B build-rev/build -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
      -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null || exit 2
    ninja -C build-rev/build -j"$JOBS" flashc || exit 2
    base=$(mktemp -d) fresh=$(mktemp -d)
    FLASHC=$PWD/build-rev/build/bin/flashc snapshot "$base"
    snapshot "$fresh"
    compare "$base" "$fresh"; status=$?
    rm -rf "$base" "$fresh"
    exit $status ;;
  *)
    echo "usage: $0 snapshot DIR | check DIR | against REV" >&2
    exit 2 ;;
esac
