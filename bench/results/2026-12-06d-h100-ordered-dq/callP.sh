#!/usr/bin/env bash
# Call P: dQ added in key-block order by default (ordered_query_grads:
# wgmma, D >= 128, full/prefix masks, no score mod or tensors). Checks of
# the new defaults, then base (cadbd7d: unordered) vs new timing, peers,
# memcheck/synccheck on an ordered default kernel.
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
for D in 128 256; do
  for f in full causal prefix_lm gqa; do echo "examples/$f.flash --shape B=2,H=4,N=1000,D=$D"; done
done
echo "examples/gqa.flash --shape B=2,H=8,HKV=2,N=1000,M=1100,D=128"
echo "examples/causal.flash --shape B=1,H=4,HKV=1,N=777,M=777,D=128"
echo "examples/full.flash --shape B=1,H=4,HKV=2,N=700,M=300,D=128"
echo "examples/full.flash --shape B=3,H=2,N=17,D=128"
echo "examples/causal.flash --shape B=2,H=2,N=1,M=100,D=256"
echo "examples/causal.flash --shape B=2,H=2,N=333,D=128 --dq-writer=false"
echo "examples/full.flash --shape B=2,H=2,N=1000,D=128 --deterministic"
echo "test/GPU/past-rows.flash --shape B=2,H=4,N=333,D=128"
} > $T/cases.txt
echo "== checks ($(wc -l < $T/cases.txt))"
xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < $T/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing"
row() { local mode=$1 run=$2 ex=$3 D=$4 N=$5; shift 5; local H=$((2048 / D)) B=$((16384 / N)) fl= hkv=
  [ $ex = causal ] && fl=--causal
  [ $ex = gqa ] && hkv=,HKV=$((H / 4))
  r=$(FLASHC_CACHE_DIR=$run.cache timeout 60 $run/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H$hkv,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || r="$ex,FAILED"
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-8s %-9s D=%s N=%s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
for c in 128:16384:full 128:16384:causal 128:4096:full 128:4096:causal 128:1024:full 128:1024:causal 256:4096:full 256:4096:causal 128:4096:prefix_lm 128:4096:gqa; do IFS=: read -r D N ex <<< "$c"
  row base $TB $ex $D $N; row new $T $ex $D $N; done
for c in 128:16384:full 128:4096:causal 256:4096:full; do IFS=: read -r D N ex <<< "$c"
  row base2 $TB $ex $D $N; row new2 $T $ex $D $N; row unord $T $ex $D $N --dq-writer=false; done
echo "== peers (same run)"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log; grep bwd $OUT/peers.csv
timeout 60 python3 .device-carry/peers.py --bwd --hdims 256 --seqs 4096 --peers sdpa-flash,sdpa-cudnn >> $OUT/peers.csv 2>>$OUT/peers.log; grep "bwd" $OUT/peers.csv | grep ",256,"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool $tool $T/flash-run examples/full.flash --shape B=1,H=2,N=300,D=128 --bwd --iters 0 > $OUT/san-$tool.log 2>&1; echo "$tool rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$tool.log)"; done
