#!/usr/bin/env bash
# Call R: backward tiles the wgmma kernel could not take before (Br a
# multiple of 16: 80, 96 at D = 128; Br = 64/128 x Bc = 128 with the dQ
# writer at D = 64), each checked against the interpreter first, timed
# beside the defaults and SDPA's cuDNN / FA2 backward in the same call.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 120 $T/flash-run "$@" --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
cat .device-carry/cases-R.txt > $T/cases.txt
echo "== checks ($(wc -l < $T/cases.txt))"
xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < $T/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing"
row() { local mode=$1 ex=$2 D=$3 N=$4; shift 4; local H=$((2048 / D)) B=$((16384 / N)) fl=
  [ $ex = causal ] && fl=--causal
  r=$(FLASHC_CACHE_DIR=$T/cache timeout 60 $T/flash-run examples/$ex.flash --bwd $fl "$@" --csv --shape B=$B,H=$H,N=$N,D=$D --iters 12 2>$OUT/last.log | tail -1)
  [ -n "$r" ] || { r="$ex,FAILED"; tail -3 $OUT/last.log; }
  echo "$mode;$r" | tee -a $OUT/time.csv | awk -F'[;,]' '{printf "%-6s %-7s D=%s N=%-5s %s ms %s TFLOP/s\n", $1, $2, $9, $7, $12, $13}'; }
while read -r D N ex mode flags; do row $mode $ex $D $N $flags; done < .device-carry/rows-R.txt
echo "== peers (same run)"
timeout 170 python3 .device-carry/peers.py --bwd --hdims 64,128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log; grep bwd $OUT/peers.csv
