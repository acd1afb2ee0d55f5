#!/usr/bin/env bash
# Call A: --bwd-carry-scores (the next query tile's S issued behind a tile's
# dQ product, D = 128 and 256). GPU checks with the default (carry on),
# sanitizers, A/B timing (carry off | on, two rounds in alternating order)
# beside SDPA's cuDNN and FA2 backward in the same call, SASS spills.
set -u
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 150 $T/flash-run "$@" --bwd --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
echo "== smoke (D = 128 full and causal, D = 256 causal)"
for s in "full 128 1000" "causal 128 1100" "causal 256 700"; do set -- $s
  if ! FLASHC_CACHE_DIR=$T/cache-check timeout 40 $T/flash-run examples/$1.flash --bwd --shape B=1,H=2,N=$3,D=$2 --iters 0 > $OUT/smoke.log 2>&1; then
    echo "SMOKE FAILED: $*"; tail -20 $OUT/smoke.log; exit 1; fi; echo "smoke ok $*"; done
echo "== timing (carry off | on | on | off, ms)"
for s in "128 full 1024" "128 causal 1024" "128 full 2048" "128 full 4096" "128 causal 4096" "128 full 16384" "128 causal 16384" "256 full 1024" "256 causal 4096"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); line="D=$D $ex N=$N"
  for flag in --bwd-carry-scores=false "" "" --bwd-carry-scores=false; do
    r=$(FLASHC_CACHE_DIR=$T/cache${flag:+-off} timeout 100 $T/flash-run examples/$ex.flash --bwd $flag --csv --shape B=$B,H=$H,N=$N,D=$D --iters 30 --check-shape B=1,H=2,N=300 2>$OUT/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -3 $OUT/last.log; }
    echo "$D,$ex,$N,${flag:-default},$ms" >> $OUT/time.csv; line="$line | $ms"
  done; echo "$line"
done
echo "== peers (same run)"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,2048,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 60 python3 .device-carry/peers.py --bwd --hdims 256 --seqs 1024,4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
echo "== checks, default ($(wc -l < .device-carry/cases.txt) cases)"
timeout 120 xargs -d '\n' -P 14 -I{} bash -c 'one $1' _ {} < .device-carry/cases.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== sanitizers (default, D = 128 and 256)"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do for s in "full 128" "causal 256"; do set -- $s
  FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool $tool $T/flash-run examples/$1.flash --shape B=1,H=2,N=700,D=$2 --bwd --iters 0 > $OUT/san-$tool-$1-$2.log 2>&1
  echo "$tool $1 D=$2 rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$tool-$1-$2.log)"; done; done
echo "== SASS: local memory in the main backward kernels (default)"
for s in "full 128" "causal 128" "full 256"; do set -- $s
  $T/flashc examples/$1.flash --bwd --emit=ptx --shape D=$2 -o $T/k.ptx 2>/dev/null && /usr/local/cuda/bin/ptxas -arch=sm_90a $T/k.ptx -o $T/k.cubin 2>/dev/null && \
  echo "$1 D=$2: HGMMA $(cuobjdump --dump-sass $T/k.cubin | grep -c HGMMA), STL/LDL $(cuobjdump --dump-sass $T/k.cubin | grep -cE 'STL|LDL')"; done
