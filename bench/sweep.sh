#!/usr/bin/env bash
# Tile-shape sweep on a GPU host: for each head dim and config, validate
# (causal and full, on a small shape) and time at N=4096, B*N=16384, H*D=2048.
# Prints one CSV row per run: causal,config,<flash-run csv>.
#   FLASH_RUN=... bench/sweep.sh "64:Br=64,Bc=64:0 64:Br=128,Bc=64:32 ..."
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
N=${N:-4096}
for spec in $1; do
  IFS=: read -r D tile rows <<< "$spec"
  H=$((2048 / D)); B=$((16384 / N))
  for causal in 0 1; do
    if [ $causal -eq 1 ]; then f=examples/causal.flash; flag=--causal; else f=examples/full.flash; flag=; fi
    row=$("$FLASH_RUN" $f --shape B=$B,H=$H,N=$N,D=$D --tile $tile --rows-per-warp $rows \
          --check-shape B=1,H=2,N=777 --iters 30 --csv $flag 2>&1 | tail -1)
    echo "$causal,D=$D $tile r=$rows,$row"
  done
done
