#!/usr/bin/env bash
# Call C: the backward beside the peers (bench/backward.sh: SDPA FA2, cuDNN),
# the training-step pair (PASS=train), and the SASS census of the main
# backward kernel (HGMMA per GEMM, no local memory).
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== sass"
mkdir -p $OUT/sass
for f in full causal; do for D in 64 128; do for det in "" --deterministic; do
  tag=$f$D${det:+-det}
  $T/flashc examples/$f.flash --bwd $det --shape D=$D --emit=ptx -o $T/$tag.ptx 2>>$OUT/sass/err.txt || continue
  /usr/local/cuda/bin/ptxas -arch=sm_90a $T/$tag.ptx -o $T/$tag.cubin
  main=$(grep -o '\.entry [a-z_0-9]*_bwd(' $T/$tag.ptx | head -1 | sed 's/.entry //; s/(//')
  /usr/local/cuda/bin/cuobjdump --dump-sass --function "$main" $T/$tag.cubin > $OUT/sass/$tag.sass 2>&1
  echo "$tag HGMMA $(grep -c HGMMA $OUT/sass/$tag.sass) STL $(grep -c STL $OUT/sass/$tag.sass) LDL $(grep -c LDL $OUT/sass/$tag.sass) lines $(wc -l < $OUT/sass/$tag.sass)"
done; done; done | tee $OUT/sass/census.txt
echo "== bwd"
FLASH_RUN=$T/flash-run ITERS=20 SEQS=${SEQS:-1024,4096,16384} timeout 300 bench/backward.sh $OUT/bwd 2>&1 | tail -16
echo "== train"
PASS=train FLASH_RUN=$T/flash-run ITERS=20 SEQS=${TSEQS:-4096,16384} timeout 240 bench/backward.sh $OUT/train 2>&1 | tail -12
echo "== sparse-mask deterministic (new vs prev = 6511c57)"
P=$(mktemp -d); tar -C "$P" -xJf .device-carry/prev.tar.xz
for f in sliding_window document; do for m in default det prev-det; do
  run=$T/flash-run; flag=; case $m in *det) flag=--deterministic;; esac; case $m in prev*) run=$P/flash-run;; esac
  pf=; [ $f = sliding_window ] && pf="--param window=1024"
  row=$(timeout 40 $run examples/$f.flash --bwd $flag --csv --shape B=1,H=16,N=16384,D=128 $pf --iters 10 2>/dev/null | tail -1)
  echo "$m,$row" | tee -a $OUT/sparse-det.csv
done; done
