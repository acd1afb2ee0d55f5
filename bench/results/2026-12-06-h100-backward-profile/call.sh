#!/usr/bin/env bash
# Call J (short): rotated walk (FLASHC_ROTATE) and the deterministic
# summary search (FLASHC_SUMMARY_SEARCH) checked in parallel, racecheck with
# the writer's hand-over as sync, then timing beside the default.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() { # env-spec args...
  local e=$1; shift
  out=$(env $e FLASHC_CACHE_DIR=$T/cache-${e%%=*} timeout 90 $T/flash-run "$@" --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $e $*"; else echo "FAIL  $e $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
{
R=FLASHC_ROTATE=1
for D in 64 128; do for f in full causal sliding_window prefix_lm alibi; do echo "$R examples/$f.flash --shape B=2,H=4,N=1000,D=$D"; done; done
echo "$R examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128"
echo "$R examples/full.flash --shape B=1,H=4,HKV=2,N=700,M=300,D=64"
echo "$R examples/causal.flash --shape B=1,H=2,N=777,D=256"
echo "$R examples/full.flash --shape B=2,H=4,N=1000,D=128 --dq-writer"
echo "$R examples/document.flash --shape B=2,H=4,N=1000,D=128"
echo "$R test/GPU/aux-grads.flash --variant two_tables --shape B=2,H=4,N=500,D=128"
S=FLASHC_SUMMARY_SEARCH=1
for D in 64 128 256; do echo "$S examples/document.flash --shape B=2,H=4,N=1000,D=$D --deterministic"; echo "$S examples/key_padding.flash --shape B=2,H=4,N=1000,D=$D --deterministic"; done
echo "$S examples/document.flash --shape B=1,H=2,N=4000,D=128 --deterministic"
echo "$S examples/document.flash --shape B=1,H=4,N=3000,D=128 --deterministic --dq-writer"
echo "$S examples/document.flash --shape B=2,H=4,N=1000,D=128 --gemm=mma.sync --deterministic"
echo "$S test/GPU/summary-masks.flash --variant doc_gqa_heads --shape B=2,H=8,HKV=2,N=1000,D=128 --deterministic"
echo "$S test/GPU/summary-masks.flash --variant padded_window --shape B=3,H=2,N=1500,D=128 --deterministic"
} > $T/cases.txt
echo "== checks ($(wc -l < $T/cases.txt))"
xargs -d '\n' -P 10 -I{} bash -c 'one $1' _ {} < $T/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== racecheck, hand-over as sync"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
FLASHC_WRITER_SYNC=1 FLASHC_CACHE_DIR=$T/cache-race timeout 60 $san --tool racecheck $T/flash-run examples/causal.flash --shape B=1,H=2,N=300,D=128 --dq-writer --deterministic --bwd --iters 0 > $OUT/race-sync.log 2>&1; tail -n 1 $OUT/race-sync.log
echo "== timing"
row() { local mode=$1 e=$2 ex=$3 D=$4 N=$5; shift 5; local H=$((2048 / D)) B=$((16384 / N)) fl=
  [ $ex = causal ] && fl=--causal
  r=$(env $e FLASHC_CACHE_DIR=$T/cache-${e%%=*} timeout 60 $T/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || r="$ex,FAILED"
  echo "$mode,$r" | tee -a $OUT/time.csv | awk -F, '{printf "%-12s %-10s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
for c in 128:16384:full 128:16384:causal; do IFS=: read -r D N ex <<< "$c"
  row default X=0 $ex $D $N; row rot FLASHC_ROTATE=1 $ex $D $N; done
for t in Br=64,Bc=64 Br=32,Bc=64; do row "tile-$t" X=0 full 128 16384 --bwd-tile $t; row "tile-$t" X=0 causal 128 16384 --bwd-tile $t; done
row default X=0 document 128 16384
row det-search FLASHC_SUMMARY_SEARCH=1 document 128 16384 --deterministic --dq-writer
row det X=0 document 128 16384 --deterministic --dq-writer
row default X=0 full 64 16384
row det X=0 full 64 16384 --deterministic
row det-64x128-writer X=0 full 64 16384 --deterministic --dq-writer --bwd-tile Br=64,Bc=128
echo "== peers (same run)"
timeout 200 python3 .device-carry/peers.py --bwd --hdims 128,64 --seqs 16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log; cat $OUT/peers.csv
echo "== ncu, default D=128 full N=4096"
CASES="d128-full|examples/full.flash|B=4,H=16,N=4096,D=128|" OUT=$OUT/profile timeout 150 bench/backward-profile.sh 2>&1 | tail -16
