#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
for s in "64 full 4096" "64 full 8192" "64 causal 4096" "64 full 2048" "64 causal 8192" "64 causal 2048"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); c=; [ $ex = causal ] && c=--causal
  tile="--bwd-tile Br=128,Bc=128"; line="D=$D $ex N=$N"
  for round in 1 2; do for mode in "" --dq-writer; do
    r=$(FLASHC_CACHE_DIR=$T/cache-o${mode:+w} timeout 60 $T/flash-run examples/$ex.flash --bwd $mode $tile $c --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }
    line="$line | $ms"
  done; done; echo "$line"
done
