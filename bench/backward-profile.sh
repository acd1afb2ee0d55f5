#!/usr/bin/env bash
# Nsight Compute over the backward's main kernel (one launch of the timed
# shape per case): the speed-of-light, warp-state and pipe sections as text,
# and the SASS source page (stall samples per instruction) as CSV.
#   TOOLS=.device-carry/flashc-tools.tar.xz OUT=out [FLASH_RUN_NAME=flash-run] bench/backward-profile.sh
# CASES: ';'-separated "label|file|shape|extra flash-run args".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
tools=$(mktemp -d)
tar -C "$tools" -xJf "${TOOLS:-.device-carry/flashc-tools.tar.xz}" || exit 2
run=$tools/${FLASH_RUN_NAME:-flash-run}
export FLASHC_CACHE_DIR=$(mktemp -d)
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
IFS=';' read -ra cases <<< "${CASES:-d128-full|examples/full.flash|B=4,H=16,N=4096,D=128|;d128-causal|examples/causal.flash|B=4,H=16,N=4096,D=128|;d64-full|examples/full.flash|B=4,H=32,N=4096,D=64|}"
for c in "${cases[@]}"; do
  IFS='|' read -r label file shape extra <<< "$c"
  echo "== $label" >&2
  timeout 280 "$ncu" --kernel-name regex:'_bwd$' --launch-skip 4 --launch-count 1 --set full \
    --import-source no -f -o "$OUT/$label" "$run" "$file" --bwd --shape "$shape" --iters 6 --warmup 2 $extra \
    > "$OUT/$label.run.log" 2>&1
  "$ncu" -i "$OUT/$label.ncu-rep" --page details > "$OUT/$label.details.txt" 2>&1
  "$ncu" -i "$OUT/$label.ncu-rep" --page source --csv --print-source sass > "$OUT/$label.sass.csv" 2>&1
  rm -f "$OUT/$label.ncu-rep"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Block Size|Grid Size|Warp Cycles Per Issued|Issue Slots Busy|Shared Memory Configuration Size" "$OUT/$label.details.txt" | head -14
done
