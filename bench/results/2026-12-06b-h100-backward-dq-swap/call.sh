#!/usr/bin/env bash
# Call L: the backward scale fold + the dQ staging lane swap (new build)
# checked, racecheck's named-barrier question on a reproducer, memcheck,
# then timing: base (before both) / new / new without the fold / new
# without the swap, the deterministic defaults, peers, and ncu's shared
# store conflicts.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
TB=$(mktemp -d); tar -C "$TB" -xJf .device-carry/base-run.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 90 $T/flash-run "$@" --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
{
for D in 64 128; do
  for f in full causal sliding_window prefix_lm document key_padding sink_window alibi softcap relative_bias gqa; do echo "examples/$f.flash --shape B=2,H=4,N=1000,D=$D"; done
  for f in full causal document relative_bias sink_window; do echo "examples/$f.flash --shape B=2,H=4,N=1000,D=$D --deterministic"; done
done
echo "examples/full.flash --shape B=1,H=4,HKV=2,N=700,M=300,D=64"
echo "examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128"
echo "examples/causal.flash --shape B=1,H=2,N=777,D=256"
echo "examples/full.flash --shape B=1,H=2,N=777,D=96"
echo "examples/causal.flash --shape B=1,H=2,N=777,D=96 --deterministic"
echo "examples/full.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync"
echo "examples/causal.flash --shape B=2,H=4,N=1000,D=64 --gemm=mma.sync --deterministic"
echo "test/GPU/past-rows.flash --shape B=2,H=4,N=333,D=128"
echo "test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1000,D=128 --deterministic"
echo "test/GPU/head-dependent-mask.flash --shape B=2,H=8,HKV=2,N=1000,D=128 --deterministic"
echo "test/GPU/gqa_per_head.flash --shape B=2,H=8,HKV=2,N=1000,D=64 --deterministic"
echo "test/GPU/aux-grads.flash --variant two_tables --shape B=2,H=4,N=500,D=128"
} > $T/cases.txt
echo "== checks ($(wc -l < $T/cases.txt))"
xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < $T/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing"
row() { local mode=$1 run=$2 e=$3 ex=$4 D=$5 N=$6; shift 6; local H=$((2048 / D)) B=$((16384 / N)) fl=
  [ $ex = causal ] && fl=--causal
  r=$(env $e FLASHC_CACHE_DIR=$run.cache-${e%%=*} timeout 60 $run/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || r="$ex,FAILED"
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-10s %-8s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
for c in 128:16384:full 128:16384:causal 64:16384:full; do IFS=: read -r D N ex <<< "$c"
  row base $TB X=0 $ex $D $N; row new $T X=0 $ex $D $N; row no-fold $T FLASHC_NO_BWD_FOLD=1 $ex $D $N; row no-swap $T FLASHC_NO_DQ_SWAP=1 $ex $D $N; done
row det-new $T X=0 full 64 16384 --deterministic
row det-new $T X=0 full 128 16384 --deterministic
row det-new $T X=0 document 128 16384 --deterministic
echo "== peers (same run)"
timeout 100 python3 .device-carry/peers.py --bwd --hdims 128,64 --seqs 16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log; grep bwd $OUT/peers.csv
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== racecheck reproducer"
chmod +x .device-carry/race_repro; timeout 60 $san --tool racecheck .device-carry/race_repro > $OUT/race-repro.log 2>&1; grep -E "^mode|SUMMARY|Error" $OUT/race-repro.log | head -12
echo "== memcheck (new default, D=128 full and D=64 det)"
FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool memcheck $T/flash-run examples/full.flash --shape B=1,H=2,N=300,D=128 --bwd --iters 0 > $OUT/memcheck.log 2>&1; tail -n 1 $OUT/memcheck.log
FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool memcheck $T/flash-run examples/causal.flash --shape B=1,H=2,N=300,D=64 --bwd --deterministic --iters 0 > $OUT/memcheck-det.log 2>&1; tail -n 1 $OUT/memcheck-det.log
echo "== ncu shared-store conflicts, new default D=128 full N=4096"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
FLASHC_CACHE_DIR=$T/cache-ncu timeout 90 $ncu --kernel-name regex:'_bwd$' --launch-skip 2 --launch-count 1 --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight $T/flash-run examples/full.flash --bwd --shape B=4,H=16,N=4096,D=128 --iters 4 --warmup 1 > $OUT/ncu.txt 2>&1; grep -E "Duration|bank|way" $OUT/ncu.txt | head -8
