#!/usr/bin/env bash
# Call Y: the coalesced preprocess + the first dQ add stored (no zeroing of
# dq_accum where every turn adds): checks, base (79b433f) vs new timing at
# short and long N, peers in the same call, gpu-fuzz (deterministic, 128 x
# 128), sanitizers, ncu of the preprocess.
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
echo "== checks ($(wc -l < .device-carry/cases-Y.txt))"
xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < .device-carry/cases-Y.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing (base 79b433f | new, ms)"
for s in "128 full 1024" "128 causal 1024" "128 full 4096" "128 causal 4096" "128 full 16384" "64 full 1024" "64 causal 1024" "64 full 4096"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); line="D=$D $ex N=$N"
  for run in $TB $T; do
    r=$(FLASHC_CACHE_DIR=$run/cache timeout 60 $run/flash-run examples/$ex.flash --bwd --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$OUT/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || ms=FAIL
    echo "$D,$ex,$N,$([ $run = $T ] && echo new || echo base),$ms" >> $OUT/time.csv; line="$line | $ms"
  done; echo "$line"
done
echo "== peers (same run)"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 100 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 1024,4096 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
echo "== gpu-fuzz (deterministic, Br=128 Bc=128, 150 cases)"
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=100 timeout 90 bash scripts/gpu-fuzz.sh .device-carry/fuzz3 > $OUT/gpu-fuzz.log 2>&1; tail -1 $OUT/gpu-fuzz.log; grep -A8 '^FAIL' $OUT/gpu-fuzz.log | head -20
echo "== sanitizers"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck; do FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool $tool $T/flash-run examples/full.flash --shape B=1,H=2,N=1100,D=128 --bwd --iters 0 > $OUT/san-$tool.log 2>&1; echo "$tool full D=128 rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$tool.log)"; done
FLASHC_CACHE_DIR=$T/cache-san timeout 60 $san --tool memcheck $T/flash-run test/GPU/pieces.flash --variant nothing_visible --shape B=1,H=2,N=700,D=128 --deterministic --bwd --iters 0 > $OUT/san-memcheck-nothing.log 2>&1; echo "memcheck nothing_visible det rc=$? $(grep 'ERROR SUMMARY' $OUT/san-memcheck-nothing.log)"
echo "== ncu preprocess (new, B=16 H=16 N=1024)"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for D in 128; do H=$((2048 / D)); timeout 40 $ncu --metrics gpu__time_duration.sum --csv --kernel-name regex:'_bwd_(preprocess|convert)' $T/flash-run examples/full.flash --bwd --shape B=16,H=$H,N=1024,D=$D --iters 1 --warmup 0 > $OUT/ncu-$D.csv 2>&1; echo "D=$D: $(grep gpu__time_duration $OUT/ncu-$D.csv | awk -F'","' '{print $5, $(NF)}' | tail -2 | tr '\n' ' ')"; done
