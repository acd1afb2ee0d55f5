#!/usr/bin/env bash
# Call S: D = 64's new backward default (128 x 128, dQ in key-block order
# above N = 1024). Checks, then base (HEAD's defaults) vs new, the 128 tile
# forced at N <= 1024, peers in the same call, sanitizers.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
TB=$(mktemp -d); tar -C "$TB" -xJf .device-carry/base-run.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 120 $T/flash-run "$@" --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
echo "== checks ($(wc -l < .device-carry/cases-S.txt))"
xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < .device-carry/cases-S.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing"
row() { local mode=$1 run=$2 ex=$3 D=$4 N=$5; shift 5; local H=$((2048 / D)) B=$((16384 / N)) fl= hkv=
  [ $ex = causal ] && fl=--causal
  [ $ex = gqa ] && hkv=,HKV=$((H / 4))
  r=$(FLASHC_CACHE_DIR=$run.cache timeout 60 $run/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H$hkv,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || { r="$ex,FAILED"; tail -3 $OUT/last.log; }
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-6s %-14s D=%s N=%-5s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
while read -r D N ex; do
  row base $TB $ex $D $N; row new $T $ex $D $N
  [ $N -le 2048 ] && [ $ex = full -o $ex = causal ] && row n128 $T $ex $D $N --bwd-tile Br=128,Bc=128
done < .device-carry/rows-S.txt
echo "== peers (same run)"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 512,1024,2048,4096,8192,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log; grep bwd $OUT/peers.csv
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do FLASHC_CACHE_DIR=$T/cache-san timeout 90 $san --tool $tool $T/flash-run examples/causal.flash --shape B=1,H=2,N=1100,D=64 --bwd --iters 0 > $OUT/san-$tool.log 2>&1; echo "$tool ordered rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$tool.log)"; done
FLASHC_CACHE_DIR=$T/cache-san timeout 120 $san --tool racecheck $T/flash-run examples/causal.flash --shape B=1,H=1,N=1100,D=64 --bwd --dq-writer=false --iters 0 > $OUT/san-racecheck.log 2>&1; echo "racecheck unordered rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-racecheck.log)"
