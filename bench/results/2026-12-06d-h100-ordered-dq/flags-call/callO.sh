#!/usr/bin/env bash
# Call O: with the new dq_accum layout, which dQ path is fastest: the
# default (thread 0 reduces), the dQ writer warp without turns
# (--dq-writer), or the deterministic writer with turns.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
row() { local mode=$1 ex=$2 D=$3 N=$4; shift 4; local H=$((2048 / D)) B=$((16384 / N)) fl=
  [ $ex = causal ] && fl=--causal
  r=$(FLASHC_CACHE_DIR=$T/cache timeout 60 $T/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || { r="$ex,FAILED"; tail -3 $OUT/last.log; }
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-8s %-8s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
for c in 128:16384:full 128:16384:causal 128:4096:full 128:4096:causal 128:1024:full 128:1024:causal 64:16384:full 64:4096:causal 64:1024:full 256:4096:full 256:4096:causal; do IFS=: read -r D N ex <<< "$c"
  row default $ex $D $N; row writer $ex $D $N --dq-writer; row det $ex $D $N --deterministic; done
for c in 128:16384:full 64:16384:full; do IFS=: read -r D N ex <<< "$c"
  row default2 $ex $D $N; row writer2 $ex $D $N --dq-writer; row det2 $ex $D $N --deterministic; done
echo "== writer checks"
for c in "examples/full.flash --shape B=2,H=4,N=1000,D=128" "examples/causal.flash --shape B=2,H=4,N=1000,D=64" "examples/document.flash --shape B=2,H=4,N=1000,D=128" "examples/causal.flash --shape B=1,H=2,N=777,D=256"; do
  FLASHC_CACHE_DIR=$T/cache timeout 90 $T/flash-run $c --bwd --dq-writer --iters 0 > $OUT/wcheck.log 2>&1 && echo "ok $c" || { echo "FAIL $c"; tail -4 $OUT/wcheck.log; }; done
