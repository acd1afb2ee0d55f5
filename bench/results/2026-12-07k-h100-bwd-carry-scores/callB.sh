#!/usr/bin/env bash
# Call B: --bwd-head-group G (the key columns of G (b, h) pairs interleaved
# in launch order). GPU checks with G = 3 (groups that do not divide the
# pairs), timing G = 1 | 2 | 4 | 8 | 1 beside SDPA's cuDNN and FA2 backward.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for s in "causal 128 1100" "causal 128 1100 --deterministic" "full 64 1500"; do set -- $s
  if ! FLASHC_CACHE_DIR=$T/cache-check timeout 40 $T/flash-run examples/$1.flash --bwd --bwd-head-group=3 --shape B=2,H=4,N=$3,D=$2 $4 --iters 0 > $OUT/smoke.log 2>&1; then
    echo "SMOKE FAILED: $*"; tail -20 $OUT/smoke.log; exit 1; fi; echo "smoke ok $*"; done
echo "== timing (G = 1 | 4 | 1, ms)"
for s in "128 causal 1024" "128 causal 4096" "128 causal 16384" "128 full 4096" "64 causal 4096"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); line="D=$D $ex N=$N"
  for g in 1 4 1; do
    r=$(FLASHC_CACHE_DIR=$T/cache-g$g timeout 60 $T/flash-run examples/$ex.flash --bwd --bwd-head-group=$g --csv --shape B=$B,H=$H,N=$N,D=$D --iters 30 --check-shape B=1,H=2,N=300 2>$OUT/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -3 $OUT/last.log; }
    echo "$D,$ex,$N,$g,$ms" >> $OUT/time.csv; line="$line | $ms"
  done; echo "$line"
done
echo "== peers (same run)"
timeout 70 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 40 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
echo "== checks with --bwd-head-group=3 ($(wc -l < .device-carry/cases.txt) cases)"
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 100 $T/flash-run "$@" --bwd --bwd-head-group=3 --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
timeout 45 xargs -d '\n' -P 14 -I{} bash -c 'one $1' _ {} < .device-carry/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -30
