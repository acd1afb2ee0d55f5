#!/usr/bin/env bash
# Call A (issue 14): the fixed --bwd-merge-barriers=3 (a body barrier
# before the dS store, 2b3e352) against the default level 2, rounds in the
# order L = 2 | 3 | 3 | 2, at D = 64 (full 1k/4k/16k, causal 4k/16k) and
# D = 128 (full 4k, causal 4k/16k); the default at the rest of the D = 128
# grid; SDPA's cuDNN and FA2 backward at D = 64 and 128 in the same call.
# Every timed run is checked against the interpreter first (--check-shape).
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for s in "full 64 1100" "causal 64 1100 --deterministic" "causal 128 1100"; do set -- $s
  if ! FLASHC_CACHE_DIR=$T/cache-check timeout 40 $T/flash-run examples/$1.flash --bwd --bwd-merge-barriers=3 --shape B=2,H=4,N=$3,D=$2 ${4:-} --iters 0 > $OUT/smoke.log 2>&1; then
    echo "SMOKE FAILED: $*"; tail -20 $OUT/smoke.log; exit 1; fi; echo "smoke ok $*"; done
time1() {  # D example N flags...: the backward's ms (CUDA-event median of 30)
  local D=$1 ex=$2 N=$3; shift 3
  r=$(FLASHC_CACHE_DIR=$T/cache-$D-$(echo "$*" | tr -c 'a-z0-9' _) timeout 60 $T/flash-run examples/$ex.flash --bwd "$@" --csv --shape B=$((16384 / N)),H=$((2048 / D)),N=$N,D=$D --iters 30 --check-shape B=1,H=2,N=300 2>$OUT/last.log | tail -1)
  ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -3 $OUT/last.log >&2; }; echo $ms
}
echo "== peers (same call)"
timeout 120 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 110 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv
grep ',bwd,' $OUT/peers.csv
echo "== levels (ms; L = 2 | 3 | 3 | 2)"
for s in "64 full 1024" "64 full 4096" "64 full 16384" "64 causal 4096" "64 causal 16384" \
         "128 full 4096" "128 causal 4096" "128 causal 16384"; do
  set -- $s; line="D=$1 $2 N=$3"
  for m in 2 3 3 2; do ms=$(time1 $1 $2 $3 --bwd-merge-barriers=$m); echo "$1,$2,$3,L$m,$ms" >> $OUT/time.csv; line="$line | $ms"; done; echo "$line"
done | tee $OUT/levels.txt
echo "== default elsewhere (ms)"
for s in "128 full 1024" "128 full 16384" "128 causal 1024" "64 causal 1024"; do
  set -- $s; ms=$(time1 $1 $2 $3); echo "$1,$2,$3,default,$ms" >> $OUT/time.csv; echo "D=$1 $2 N=$3 | $ms"
done | tee $OUT/default.txt
