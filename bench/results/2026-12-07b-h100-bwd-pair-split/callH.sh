#!/usr/bin/env bash
# Call H (experiment build; env toggles, separate caches since the env is
# not in the cache key): D = 128: base | PAIRDP (dP beside S) | PAIRDP +
# AHEAD (and dV issued ahead); D = 64: base (dQ split over the warpgroups'
# query slices) | NOSPLIT. Checks first.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
envof() { case $1 in base) echo "";; pair) echo "PAIRDP=1";; pairahead) echo "PAIRDP=1 AHEAD=1";; nosplit) echo "NOSPLIT=1";; esac; }
chk() { v=$1; shift; out=$(env $(envof $v) FLASHC_CACHE_DIR=$T/cache-$v timeout 60 $T/flash-run "$@" --bwd --iters 0 2>&1) && echo "ok   $v $*" || { echo "FAIL $v $*"; echo "$out" | tail -4; }; }
export -f chk envof; export T
{
for v in base pair pairahead; do for ex in full causal document; do echo "$v examples/$ex.flash --shape B=2,H=4,N=1100,D=128"; done; done
for ex in full causal alibi key_padding sink_window prefix_lm gqa; do echo "base examples/$ex.flash --shape B=2,H=4,N=2500,D=64 --bwd-tile Br=128,Bc=128"; done
echo "base examples/alibi.flash --shape B=1,H=4,N=2100,D=64"
echo "base examples/full.flash --shape B=1,H=4,N=3000,D=64 --deterministic"
echo "base examples/causal.flash --shape B=1,H=4,N=1700,D=64 --bwd-tile Br=64,Bc=128"
echo "base examples/full.flash --shape B=1,H=4,N=900,D=64 --bwd-tile Br=32,Bc=128"
} > $T/cases
xargs -d '\n' -P 12 -I{} bash -c 'chk $1' _ {} < $T/cases 2>&1 | sort | tee $OUT/checks.log | grep -c '^ok'; grep -A4 '^FAIL' $OUT/checks.log | head -30
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do FLASHC_CACHE_DIR=$T/cache-san timeout 45 $san --tool $tool $T/flash-run examples/causal.flash --shape B=1,H=2,N=700,D=64 --bwd --bwd-tile Br=128,Bc=128 --dq-writer=false --iters 0 > $OUT/san-$tool.log 2>&1; echo "$tool D=64 128x128 no writer rc=$? $(tail -1 $OUT/san-$tool.log)"; done
tm() { v=$1 ex=$2 N=$3 D=$4; B=$((16384 / N)); H=$((2048 / D)); env $(envof $v) FLASHC_CACHE_DIR=$T/cache-$v timeout 60 $T/flash-run examples/$ex.flash --bwd --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>/dev/null | tail -1 | awk -F, '{print $11}'; }
echo "== D=128 ms (base | pair | pair+ahead)"
for round in 1; do for s in "full 1024" "causal 1024" "full 4096" "causal 4096" "full 16384" "causal 16384"; do
  set -- $s; echo "D=128 $1 N=$2 | $(tm base $1 $2 128) | $(tm pair $1 $2 128) | $(tm pairahead $1 $2 128)"; done; done
echo "== D=64 ms (split | nosplit)"
for round in 1 2; do for s in "full 4096" "causal 4096" "full 16384" "causal 16384" "full 8192"; do
  set -- $s; echo "D=64 $1 N=$2 | $(tm base $1 $2 64) | $(tm nosplit $1 $2 64)"; done; done
