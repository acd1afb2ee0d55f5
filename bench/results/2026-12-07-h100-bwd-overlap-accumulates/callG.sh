#!/usr/bin/env bash
# Call G: --bwd-overlap-accumulates (dV, dK products left in flight): GPU
# checks with the flag, A/B timing (default | flag) beside SDPA's cuDNN and
# FA2 backward in the same call, sanitizers with the flag, gpu-fuzz of
# backward cases with the flag at D = 64 and 128.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
FL=--bwd-overlap-accumulates
one() {
  out=$(FLASHC_CACHE_DIR=$T/cache-check timeout 120 $T/flash-run "$@" --bwd --bwd-overlap-accumulates --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok    $*"; else echo "FAIL  $* ($rc)"; echo "$out" | tail -6; fi
}
export -f one; export T
echo "== checks with $FL ($(wc -l < .device-carry/cases-G.txt))"
timeout 150 xargs -d '\n' -P 12 -I{} bash -c 'one $1' _ {} < .device-carry/cases-G.txt > $OUT/checks.log 2>&1
echo "ok $(grep -c '^ok' $OUT/checks.log), FAIL $(grep -c '^FAIL' $OUT/checks.log)"; grep -A6 '^FAIL' $OUT/checks.log | head -40
echo "== timing (default | $FL, ms)"
for s in "128 full 1024" "128 causal 1024" "128 full 4096" "128 causal 4096" "128 full 16384" "128 causal 16384" "64 full 4096" "64 causal 4096" "64 full 16384" "64 full 1024"; do
  set -- $s; D=$1; ex=$2; N=$3; B=$((16384 / N)); H=$((2048 / D)); line="D=$D $ex N=$N"
  for flag in "" $FL; do
    r=$(FLASHC_CACHE_DIR=$T/cache${flag:+-ov} timeout 90 $T/flash-run examples/$ex.flash --bwd $flag --csv --shape B=$B,H=$H,N=$N,D=$D --iters 20 2>$OUT/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -3 $OUT/last.log; }
    echo "$D,$ex,$N,${flag:-default},$ms" >> $OUT/time.csv; line="$line | $ms"
  done; echo "$line"
done
echo "== peers (same run)"
timeout 150 python3 .device-carry/peers.py --bwd --hdims 128 --seqs 1024,4096,16384 --peers sdpa-cudnn,sdpa-flash > $OUT/peers.csv 2>$OUT/peers.log
timeout 80 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 1024,4096,16384 --peers sdpa-cudnn 2>>$OUT/peers.log | grep -v '^peer' >> $OUT/peers.csv; grep ',bwd,' $OUT/peers.csv
echo "== sanitizers ($FL)"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do for D in 128 64; do FLASHC_CACHE_DIR=$T/cache-san timeout 45 $san --tool $tool $T/flash-run examples/causal.flash --shape B=1,H=2,N=700,D=$D --bwd --bwd-tile Br=$((D == 64 ? 128 : 64)),Bc=128 $FL --iters 0 > $OUT/san-$tool-$D.log 2>&1; echo "$tool causal D=$D rc=$? $(grep 'ERROR SUMMARY' $OUT/san-$tool-$D.log)"; done; done
echo "== gpu-fuzz (backward, $FL, D = 64 and 128)"
FLASH_RUN=$T/flash-run JOBS=14 CASE_TIMEOUT=60 timeout 100 bash scripts/gpu-fuzz.sh .device-carry/fuzz6 > $OUT/gpu-fuzz.log 2>&1; tail -1 $OUT/gpu-fuzz.log; grep -A8 '^FAIL' $OUT/gpu-fuzz.log | head -30
echo "== aot-documents (reference widened once)"
g++ -O2 -std=c++17 -Iruntime/include -Ipython-free-driver/examples/aot -I.device-carry/aot/gen-doc \
  python-free-driver/examples/aot/documents_main.cpp .device-carry/aot/gen-doc/document.cpp \
  runtime/lib/*.cpp -ldl -lpthread -o $T/aot-documents > $OUT/aot-build.log 2>&1 || tail -5 $OUT/aot-build.log
timeout 60 $T/aot-documents 2>&1 | tee $OUT/aot-documents.log; echo "aot-documents exit ${PIPESTATUS[0]}"
