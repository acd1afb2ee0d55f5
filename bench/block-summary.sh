#!/usr/bin/env bash
# One device call for run-time block sparsity (issue 15): GPU vs
# interpreter (outputs and the summary bytes), packed documents, sink +
# window and prefix-LM beside FlexAttention with a BlockMask (same run,
# ../shared/bench/peers_infer.py), a dense regression row, and
# compute-sanitizer on the summary and main kernels at a small shape.
# Expects .device-carry/flashc-tools.tar.xz (flash-run) and
# .device-carry/peers_masks.py (../shared/bench/peers_infer.py with a
# --masks filter: one mask per process, as torch.compile recompiles Flex per
# mask and shape and stops compiling after 8). Prints tables last.
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
FR="$T/flash-run"
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
DOCS=${DOCS:-20}

echo "== checks (GPU vs interpreter, summary bytes)"
fails=0
for D in 64 128; do
  for spec in "document B=2,H=4,N=1000" "document B=1,H=8,N=777" "key_padding B=3,H=4,HKV=2,N=513,M=900" \
              "sink_window B=1,H=4,N=1500" "prefix_lm B=2,H=4,N=1100"; do
    set -- $spec
    f=$1; shape=$2
    out=$("$FR" examples/$f.flash --shape $shape,D=$D --iters 0 --docs 7 2>&1); rc=$?
    # exit 0 means every check passed (the summary bytes too, where there is one)
    if [ $rc -eq 0 ] && ! echo "$out" | grep -q FAIL; then
      echo "ok   $f $shape D=$D"
    else
      echo "FAIL $f $shape D=$D"; echo "$out" | tail -5; fails=$((fails+1))
    fi
  done
  out=$("$FR" examples/document.flash --shape B=1,H=2,N=600,D=$D --iters 0 --gemm=mma.sync 2>&1)
  echo "$out" | grep -q "GPU == interpreter  ok" && ! echo "$out" | grep -q FAIL && echo "ok   document mma.sync D=$D" || { echo "FAIL document mma.sync D=$D"; echo "$out" | tail -4; fails=$((fails+1)); }
done

echo "== flashc packed documents (B=1, H=16, $DOCS docs)"
echo "name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/flashc-docs.csv"
for D in 64 128; do
  for N in 8192 16384 32768; do
    "$FR" examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs $DOCS --csv 2>&1 | tail -1 | tee -a "$OUT/flashc-docs.csv"
  done
done
echo "== flashc sink + window and prefix-LM (B=1, H=16; Flex's sink 4, window 256, prefix 1024)"
echo "name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/flashc-masks.csv"
for D in 64 128; do
  for N in 8192 16384 32768; do
    "$FR" examples/sink_window.flash --shape B=1,H=16,N=$N,D=$D --csv 2>&1 | tail -1 | tee -a "$OUT/flashc-masks.csv"
    "$FR" examples/prefix_lm.flash --shape B=1,H=16,N=$N,D=$D --param prefix=1024 --csv 2>&1 | tail -1 | tee -a "$OUT/flashc-masks.csv"
  done
  # prefix-LM's tile before it counted as one piece (one warpgroup, 64 x 64)
  "$FR" examples/prefix_lm.flash --shape B=1,H=16,N=16384,D=$D --param prefix=1024 --tile Br=64,Bc=64 --csv 2>&1 | tail -1 | sed 's/^prefix_lm/prefix_lm_64x64/' | tee -a "$OUT/flashc-masks.csv"
done
echo "== dense causal row (regression)"
"$FR" examples/causal.flash --shape B=1,H=16,N=16384,D=128 --causal --csv 2>&1 | tail -1 | tee "$OUT/flashc-causal.csv"

echo "== peers (FlexAttention with a BlockMask, same call)"
for m in document sink_window prefix_lm; do
  timeout 300 python3 .device-carry/peers_masks.py masks --masks $m --N 8192,16384,32768 --D 64,128 --H 16 --docs $DOCS 2>&1 | grep -E "^peer|^flex" | tee -a "$OUT/peers-masks.csv"
done

if [ "${SANITIZE:-1}" = 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  echo "== compute-sanitizer (document and key_padding, B=1 H=2 N=300 D=64: summary + main kernel)"
  for tool in memcheck racecheck synccheck; do
    for f in document key_padding; do
      log="$T/sanitizer-$tool-$f.log"
      timeout 200 "$sanitizer" --tool $tool "$FR" examples/$f.flash --shape B=1,H=2,N=300,D=64 \
        --iters 0 --docs 5 > "$log" 2>&1
      echo "$tool $f: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$log" | tail -1)" | tee -a "$OUT/sanitizer.txt"
    done
  done
fi

echo "== table: packed documents, flashc (summary included) vs Flex, ms"
echo "D N flashc summary cached flex flex/flashc"
for D in 64 128; do for N in 8192 16384 32768; do
  f=$(awk -F, -v n=$N -v d=$D '$6==n && $8==d {print $10, $14, $15}' "$OUT/flashc-docs.csv")
  x=$(awk -F, -v n=$N -v d=$D '$1=="flex" && $2=="document" && $5==n && $6==d {print $7}' "$OUT/peers-masks.csv")
  set -- $f
  r=$(python3 -c "print(f'{float(\"$x\")/float(\"$1\"):.2f}')" 2>/dev/null || echo "?")
  echo "$D $N $1 $2 $3 $x $r"
done; done
echo "== table: sink + window and prefix-LM, flashc vs Flex, ms"
echo "mask D N flashc flex flex/flashc"
for m in sink_window prefix_lm; do for D in 64 128; do for N in 8192 16384 32768; do
  a=$(awk -F, -v n=$N -v d=$D -v m=$m '$1==m && $6==n && $8==d {print $10}' "$OUT/flashc-masks.csv")
  x=$(awk -F, -v n=$N -v d=$D -v m=$m '$1=="flex" && $2==m && $5==n && $6==d {print $7}' "$OUT/peers-masks.csv")
  r=$(python3 -c "print(f'{float(\"$x\")/float(\"$a\"):.2f}')" 2>/dev/null || echo "?")
  echo "$m $D $N $a $x $r"
done; done; done
grep prefix_lm_64x64 "$OUT/flashc-masks.csv" | awk -F, '{print "prefix_lm 64x64 (before) D=" $8 " N=" $6 ": " $10 " ms"}'
echo "check failures: $fails"
