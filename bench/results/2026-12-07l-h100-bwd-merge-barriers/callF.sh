#!/usr/bin/env bash
# Call F (after call E ran out of time in its peers): every check case at
# the level the measurement favours (--bwd-merge-barriers=3 at D <= 64, 2
# above), SDPA's cuDNN and FA2 backward at D = 128 and 64, and
# compute-sanitizer (memcheck, synccheck) on the three-stage kernel.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== checks (L = 3 at D <= 64, else 2; $(wc -l < .device-carry/cases.txt) cases)"
one() {
  case "$*" in *D=64*) L=3;; *) L=2;; esac
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 100 $T/flash-run "$@" --bwd --bwd-merge-barriers=$L --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    L=$L $*"; else echo "FAIL  L=$L $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
timeout 70 xargs -d '\n' -P 14 -I{} bash -c 'one $1' _ {} < .device-carry/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -30
echo "== compute-sanitizer (L = 3, full D = 64, B=1 H=2 N=300)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do
  FLASHC_CACHE_DIR=$T/cache-san timeout 40 $CS --tool $tool $T/flash-run examples/full.flash --bwd --bwd-merge-barriers=3 --shape B=1,H=2,N=300,D=64 --iters 0 > $OUT/san-$tool.log 2>&1
  echo "$tool: rc $? | $(grep -E 'ERROR SUMMARY' $OUT/san-$tool.log | tail -1)"
done
echo "== peers (same machine as call E when warm)"
timeout 100 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 35 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
