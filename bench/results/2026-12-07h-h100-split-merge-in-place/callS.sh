#!/usr/bin/env bash
# Call S (issue 16): split-key kernels that merge their splits in place
# (the last split to store a warp's rows merges them; no combine launch).
# 1. gpu-check's split-keys, packed and paged sections against the
#    interpreter; 2. compute-sanitizer (memcheck, racecheck, synccheck) on a
#    packed split launch, dense and over 16-key pages; 3. old (a separate
#    combine kernel, flash-run-old) against new in alternating rounds at
#    decode shapes, SDPA's flash and cuDNN beside. Tables last.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz; export FLASHC_CACHE_DIR=$T/cache
xz -dc .device-carry/flash-run-old.xz > $T/flash-run-old; chmod +x $T/flash-run-old
echo "== checks"
SECTIONS=split-keys,packed,paged FLASH_RUN="$T/flash-run" timeout 200 bash scripts/gpu-check.sh > $OUT/checks.txt 2>&1
tail -1 $OUT/checks.txt; grep -E "^FAIL" $OUT/checks.txt | head -5
echo "== compute-sanitizer"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
split="--shape B=4,H=8,HKV=2,N=3,M=600,D=128 --splits 4"
for tool in memcheck racecheck synccheck; do
  for c in "examples/gqa.flash $split" "test/Driver/Inputs/paged-no-page.flash --paged 16 $split" \
           "examples/gqa.flash --gemm mma.sync $split"; do
    # shellcheck disable=SC2086
    timeout 120 $SAN --tool $tool --error-exitcode 9 $T/flash-run $c --iters 0 > $T/san.log 2>&1
    echo "$tool exit $? [$c]: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $T/san.log | tr '\n' ' ')"
    cat $T/san.log >> $OUT/sanitizer.txt
  done
done
echo "== old (combine kernel) vs new (in-place merge), K + V GB/s, two alternating rounds"
shapes="1/32/8/2048 1/32/8/8192 1/32/8/32768 1/32/8/131072 1/32/32/2048 1/32/32/8192 8/32/8/2048 8/32/8/8192"
for round in 1 2; do for s in $shapes; do
  IFS=/ read -r B H HKV M <<< "$s"
  row="round $round $s"
  for tool in flash-run-old flash-run; do
    r=$(timeout 60 $T/$tool examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 --csv --warmup 20 --iters 100 2>/dev/null | tail -1)
    case "$r" in *FAIL*) row="$row FAIL";; "") row="$row ERR";; *) row="$row $(echo $r | cut -d, -f15)/$(echo $r | cut -d, -f14)";; esac
  done
  echo "$row"
done; done | tee $OUT/oldnew.txt
echo "== paged 16 (TMA), B=1 32/8 M=8192: old / new"
for round in 1 2; do
  row="round $round"
  for tool in flash-run-old flash-run; do
    r=$(timeout 60 $T/$tool bench/inputs/paged_gqa.flash --paged 16 --full-lengths --shape B=1,H=32,HKV=8,N=1,M=8192,D=128 --csv --warmup 20 --iters 100 2>/dev/null | tail -1)
    row="$row $(echo $r | cut -d, -f15)"
  done
  echo "$row"
done | tee $OUT/paged.txt
echo "== peers"
for g in 32/8 32/32; do
  timeout 120 python3 .device-carry/peers_infer.py decode --B 1,8 --M 2048,8192,32768,131072 --H ${g%/*} --HKV ${g#*/} \
    --D 128 --peers sdpa-flash,sdpa-cudnn --max-tokens 1048576 2>/dev/null | tail -n +2
done | tee $OUT/peers.csv
echo "== causal D=128 N=16384 B=1 H=16: ms persistent / one CTA per tile (new tools, 3 more rounds)"
for round in 1 2 3; do
  p=$(timeout 60 $T/flash-run examples/causal.flash --shape B=1,H=16,N=16384,D=128 --persistent=true \
      --iters 50 --csv 2>/dev/null | tail -1 | cut -d, -f10)
  o=$(timeout 60 $T/flash-run examples/causal.flash --shape B=1,H=16,N=16384,D=128 --persistent=false \
      --iters 50 --csv 2>/dev/null | tail -1 | cut -d, -f10)
  echo "round $round persistent $p one-per-tile $o"
done | tee $OUT/causal-grids.txt
