#!/usr/bin/env bash
# Call G: the levels call E favoured at the shapes it did not time:
# D = 64 (L = 0 | 3 | 3 | 0) and D = 128 causal 16k (L = 0 | 2 | 2 | 0).
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
time1() {
  local D=$1 ex=$2 N=$3; shift 3
  r=$(FLASHC_CACHE_DIR=$T/cache-$(echo "$*" | tr -c 'a-z0-9' _) timeout 40 $T/flash-run examples/$ex.flash --bwd "$@" --csv --shape B=$((16384 / N)),H=$((2048 / D)),N=$N,D=$D --iters 30 --check-shape B=1,H=2,N=300 2>$OUT/last.log | tail -1)
  ms=$(echo "$r" | awk -F, '{print $11}'); echo ${ms:-FAIL}
}
for s in "64 full 1024 3" "64 full 16384 3" "64 causal 4096 3" "64 causal 16384 3" "128 causal 16384 2"; do
  set -- $s; line="D=$1 $2 N=$3 (L = 0 | $4 | $4 | 0)"
  for m in 0 $4 $4 0; do ms=$(time1 $1 $2 $3 --bwd-merge-barriers=$m); echo "$1,$2,$3,L$m,$ms" >> $OUT/time.csv; line="$line | $ms"; done; echo "$line"
done
