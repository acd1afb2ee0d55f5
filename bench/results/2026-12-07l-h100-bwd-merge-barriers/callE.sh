#!/usr/bin/env bash
# Call E: calls C and D in one (device starts were scarce). Issue 14:
# --bwd-merge-barriers L (1: the dQ writer's staging-free barrier also
# publishes dS; 2: also a pipelined tile's copies acquired at the barrier
# that starts it; 3: also three Q/dO stages, the tile after next copied
# once dQ is staged, the next tile's copies acquired at the dS barrier, no
# barrier at a tile's start), timed L = 0 | 2 | 3 | 3 | 2 | 0;
# --bwd-head-group G (key columns of G (b, h) pairs interleaved in launch
# order), timed G = 1 | 4 | 1; peers (SDPA cuDNN, FA2) in the same run;
# every check case with both (L = 3, G = 3); compute-sanitizer at L = 3.
# Issue 16: paged decode, pages 16 and 32 by TMA and by cp.async, vs dense.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for s in "full 128 1100" "causal 128 1100 --deterministic" "causal 256 700"; do set -- $s
  if ! FLASHC_CACHE_DIR=$T/cache-check timeout 40 $T/flash-run examples/$1.flash --bwd --bwd-merge-barriers=3 --bwd-head-group=3 --shape B=2,H=4,N=$3,D=$2 ${4:-} --iters 0 > $OUT/smoke.log 2>&1; then
    echo "SMOKE FAILED: $*"; tail -20 $OUT/smoke.log; exit 1; fi; echo "smoke ok $*"; done
time1() {  # D example N flags...: the backward's ms (CUDA-event median of 30)
  local D=$1 ex=$2 N=$3; shift 3
  r=$(FLASHC_CACHE_DIR=$T/cache-$(echo "$*" | tr -c 'a-z0-9' _) timeout 60 $T/flash-run examples/$ex.flash --bwd "$@" --csv --shape B=$((16384 / N)),H=$((2048 / D)),N=$N,D=$D --iters 30 --check-shape B=1,H=2,N=300 2>$OUT/last.log | tail -1)
  ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -3 $OUT/last.log >&2; }; echo $ms
}
echo "== merge barriers (ms; L = 0 | 2 | 3 | 3 | 2 | 0)"
for s in "128 full 1024" "128 full 4096" "128 full 16384" "128 causal 4096" "64 full 4096" "256 full 1024"; do
  set -- $s; line="D=$1 $2 N=$3"
  for m in 0 2 3 3 2 0; do ms=$(time1 $1 $2 $3 --bwd-merge-barriers=$m); echo "$1,$2,$3,L$m,$ms" >> $OUT/time.csv; line="$line | $ms"; done; echo "$line"
done | tee $OUT/merge.txt
echo "== head group (ms; G = 1 | 4 | 1)"
for s in "128 causal 1024" "128 causal 4096" "64 causal 4096"; do
  set -- $s; line="D=$1 $2 N=$3"
  for g in 1 4 1; do ms=$(time1 $1 $2 $3 --bwd-head-group=$g); echo "$1,$2,$3,G$g,$ms" >> $OUT/time.csv; line="$line | $ms"; done; echo "$line"
done | tee $OUT/head-group.txt
echo "== peers (same run)"
timeout 80 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 45 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv
timeout 45 python3 .device-carry/peers.py --bwd --hdims 256 --seqs 1024 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
echo "== checks with --bwd-merge-barriers=3 --bwd-head-group=3 ($(wc -l < .device-carry/cases.txt) cases)"
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 100 $T/flash-run "$@" --bwd --bwd-merge-barriers=3 --bwd-head-group=3 --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
timeout 60 xargs -d '\n' -P 14 -I{} bash -c 'one $1' _ {} < .device-carry/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -30
echo "== paged decode (K+V GB/s): dense | p16 tma | p16 cp.async | p32 tma | p32 cp.async"
for shape in 1/8192 1/8192 8/8192 32/8192; do
  B=${shape%/*}; M=${shape#*/}; row="B=$B M=$M"
  for cfg in "examples/gqa.flash|" "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths" \
             "bench/inputs/paged_gqa.flash|--paged 16 --full-lengths --kv-copy cp.async" \
             "bench/inputs/paged_gqa.flash|--paged 32 --full-lengths" \
             "bench/inputs/paged_gqa.flash|--paged 32 --full-lengths --kv-copy cp.async"; do
    f=${cfg%%|*}; flags=${cfg#*|}
    # shellcheck disable=SC2086
    gb=$(FLASHC_CACHE_DIR=$T/cache-paged timeout 40 $T/flash-run $f --shape B=$B,H=32,HKV=8,N=1,M=$M,D=128 $flags --csv --warmup 20 --iters 100 2>>$OUT/paged.err \
      | tail -1 | cut -d, -f15)
    row="$row | ${gb:-FAIL}"
  done
  echo "$row"
done | tee $OUT/paged.txt
echo "== compute-sanitizer (L = 3, D = 128, B=1 H=2 N=300)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for c in "memcheck full" "racecheck full" "synccheck causal --deterministic"; do set -- $c
  FLASHC_CACHE_DIR=$T/cache-san timeout 50 $CS --tool $1 $T/flash-run examples/$2.flash ${3:-} --bwd --bwd-merge-barriers=3 --shape B=1,H=2,N=300,D=128 --iters 0 > $OUT/san-$1-$2.log 2>&1
  echo "$c: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$1-$2.log | tail -1)"
done
