#!/usr/bin/env bash
# Call V: D = 64 variants the new tile rule leaves on one warpgroup (score
# mods, tensor reads, keys in pieces): 64 x 128 and 128 x 128 (where ptxas
# finds no spill), with and without the dQ writer, N = 16384 and 4096.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export FLASHC_CACHE_DIR=$T/cache
echo "== checks"
while read -r ex mode flags; do
  [ $mode = def ] && continue
  out=$(timeout 90 $T/flash-run examples/$ex.flash --bwd $flags --shape B=1,H=2,N=1100,D=64 --iters 0 2>&1) && echo "ok   $ex $mode" || { echo "FAIL $ex $mode"; echo "$out" | tail -4; }
done < .device-carry/rows-V.txt > $OUT/checks.log 2>&1
echo "checks: ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A4 '^FAIL' $OUT/checks.log | head -20
echo "== timing"
for N in 16384 4096; do B=$((16384 / N))
while read -r ex mode flags; do
  r=$(timeout 60 $T/flash-run examples/$ex.flash --bwd $flags --csv --shape B=$B,H=32,N=$N,D=64 --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || { r="$ex,FAILED"; tail -2 $OUT/last.log; }
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-6s %-12s N=%-5s %s ms\n", $1, $2, $7, $12}'
done < .device-carry/rows-V.txt; done
