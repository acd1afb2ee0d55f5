#!/usr/bin/env bash
# Call J (issue 14): D = 256 with the two warpgroups splitting D (Bc = 64,
# --bwd-tile Br=32,Bc=64) against the CTA column slices (the default,
# Br = 32, Bc = 128): GPU checks of every D = 256 case in the new mode,
# sanitizers, timing beside FA2 and cuDNN; then the order of dQ adds
# (default | --dq-writer, any order) at D = 64 and 128.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
SPLIT="--bwd-tile Br=32,Bc=64"
echo "== D = 256 checks, $SPLIT"
HEAD_DIMS=256 FLAGS="$SPLIT" FLASH_RUN=$T/flash-run CASE_TIMEOUT=90 timeout 200 bash scripts/gpu-backward-check.sh > $OUT/checks256.log 2>&1
echo "exit $?"; tail -3 $OUT/checks256.log; grep -A8 "^FAIL" $OUT/checks256.log | head -40
echo "== sanitizers ($SPLIT)"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do for w in "" "--dq-writer=false"; do
  timeout 60 $san --tool $tool $T/flash-run examples/causal.flash --shape B=1,H=2,N=300,D=256 --bwd $SPLIT $w --iters 0 > $T/san.log 2>&1
  echo "$tool ${w:-writer} rc=$? $(grep 'ERROR SUMMARY' $T/san.log)"; cat $T/san.log >> $OUT/sanitizer.log; done; done
echo "== D = 256 timing: column slices (default) | $SPLIT, ms, two rounds"
for s in "full 1024" "causal 1024" "full 4096" "causal 4096" "full 16384" "causal 16384"; do
  set -- $s; ex=$1; N=$2; B=$((16384 / N)); c=; [ $ex = causal ] && c=--causal; line="D=256 $ex N=$N"
  for round in 1 2; do for mode in "" "$SPLIT"; do
    r=$(timeout 90 $T/flash-run examples/$ex.flash --bwd $mode $c --csv --shape B=$B,H=8,N=$N,D=256 --iters 20 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }
    echo "$ex,$N,${mode:-slices},$round,$r" >> $OUT/d256.csv; line="$line | $ms"
  done; done; echo "$line"
done
echo "== peers D = 256"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 256 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash 2>$OUT/peers.log | tee $OUT/peers256.csv | grep ',bwd,'
echo "== order of dQ adds: default | --dq-writer (any order), ms, two rounds"
for s in "128 full 1024" "128 full 2048" "128 full 4096" "128 full 8192" "128 causal 2048" "128 causal 4096" "128 causal 8192" \
         "64 full 2048" "64 full 4096" "64 full 8192" "64 causal 2048" "64 causal 4096" "64 causal 8192"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); c=; [ $ex = causal ] && c=--causal
  tile=; [ $D = 64 ] && tile="--bwd-tile Br=128,Bc=128"; line="D=$D $ex N=$N"
  for round in 1 2; do for mode in "" --dq-writer; do
    r=$(FLASHC_CACHE_DIR=$T/cache-o${mode:+w} timeout 60 $T/flash-run examples/$ex.flash --bwd $mode $tile $c --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$T/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $T/last.log; }
    echo "$D,$ex,$N,${mode:-default},$round,$ms" >> $OUT/order.csv; line="$line | $ms"
  done; done; echo "$line"
done
