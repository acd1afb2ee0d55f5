#!/usr/bin/env bash
# Call T (issue 16): the split count at short decode shapes. flash-run of
# acb1b91 (the split kernel and its combine kernel, as HEAD), --splits 1 .. 64
# at B = 1 and 8, two rounds, every run checked against the interpreter.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); xz -dc .device-carry/flash-run-old.xz > $T/flash-run; chmod +x $T/flash-run
export FLASHC_CACHE_DIR=$T/cache
timeout 60 $T/flash-run examples/gqa.flash --shape B=1,H=32,HKV=8,N=1,M=2048,D=128 --iters 50 > /dev/null 2>&1
echo "shape auto_splits auto_GBps then splits:GBps for 1 2 4 8 16 32 64"
for round in 1; do
for s in 1/32/8/2048 1/32/8/8192 1/64/8/2048 8/32/8/2048; do
  IFS=/ read -r B H HKV M <<< "$s"
  a=$(timeout 60 $T/flash-run examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 --csv --warmup 20 --iters 100 2>/dev/null | tail -1)
  row="r$round $s auto $(echo $a | cut -d, -f14):$(echo $a | cut -d, -f15)"
  for S in 1 2 4 8 16 32; do
    r=$(timeout 60 $T/flash-run examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 --splits $S --csv --warmup 20 --iters 100 2>/dev/null | tail -1)
    case "$r" in *FAIL*) row="$row $S:FAIL";; "") row="$row $S:ERR";; *) row="$row $S:$(echo $r | cut -d, -f15)";; esac
  done
  echo "$row"
done; done | tee $OUT/sweep.txt
