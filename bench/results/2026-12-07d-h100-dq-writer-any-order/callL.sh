#!/usr/bin/env bash
# Call L (issue 14): D = 64 unmasked at N <= 8192 now adds dQ by the writer
# in any order (d6db486). GPU checks of such kernels, sanitizers on one,
# timing of the new default against --deterministic (the key-block order
# the default took before: the same kernel) beside SDPA's cuDNN backward.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
one() { out=$(timeout 90 $T/flash-run "$@" --bwd --iters 0 2>&1) && echo "ok    $*" || { echo "FAIL  $*"; echo "$out" | tail -4; }; }
echo "== checks"
one examples/full.flash --shape B=1,H=2,N=4096,D=64
one examples/full.flash --shape B=2,H=3,N=3000,D=64
one examples/full.flash --shape B=1,H=2,N=5000,M=4000,D=64 --layout bshd
one examples/full.flash --shape B=1,H=4,HKV=1,N=8192,D=64
one examples/full.flash --shape B=1,H=2,N=2500,D=32
echo "== sanitizers (N = 700, 128 x 128 tile)"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  timeout 60 $san --tool $tool $T/flash-run examples/full.flash --shape B=1,H=2,N=700,D=64 --bwd --bwd-tile Br=128,Bc=128 --iters 0 > $T/san.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $T/san.log | head -2 | tr '\n' ' ')"; done
echo "== timing: default | --deterministic (the order), ms, two rounds"
for N in 4096 8192 16384; do B=$((16384 / N)); line="D=64 full N=$N"
  for round in 1 2; do for mode in "" --deterministic; do
    r=$(FLASHC_CACHE_DIR=$T/c${mode:+d} timeout 90 $T/flash-run examples/full.flash --bwd $mode --csv --shape B=$B,H=32,N=$N,D=64 --iters 20 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }; line="$line | $ms"
  done; done; echo "$line"
done
echo "== peers"
timeout 100 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 4096,8192 --peers sdpa-cudnn,sdpa-flash 2>/dev/null | grep ',bwd,' | grep ',0,[0-9.]*,[0-9.]*,$'
