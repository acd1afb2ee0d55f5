#!/usr/bin/env bash
# One device call for the walk over visible blocks (issue 15, deliverable
# 2): the walking kernels against the interpreter first, then sink + window
# and prefix-LM beside FlexAttention with a BlockMask (same call), a dense
# causal row, and sink + window in the warp-specialized walk (--tile
# Br=128,Bc=128) beside the default one-warpgroup 64 x 64 walk.
# Expects .device-carry/flashc-tools.tar.xz (flash-run) and
# .device-carry/peers_masks.py (see bench/block-summary.sh). Tables last.
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
FR="$T/flash-run"
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

echo "== walking kernels vs the interpreter"
fails=0
check() {
  out=$(timeout 60 "$FR" "$@" --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $*"; else echo "FAIL $* (exit $rc)"; echo "$out" | tail -4; fails=$((fails+1)); fi
}
for D in 64 128; do
  check examples/sink_window.flash --shape B=1,H=4,HKV=2,N=1500,M=1500,D=$D
  check examples/sink_window.flash --shape B=2,H=4,HKV=4,N=9000,M=9000,D=$D
  check test/GPU/pieces.flash --variant two_windows --shape B=2,H=4,HKV=2,N=1000,M=1300,D=$D
  check test/GPU/pieces.flash --variant nothing_visible --shape B=1,H=2,N=700,D=$D
done
check examples/sink_window.flash --shape B=1,H=2,HKV=2,N=700,M=700,D=256
check examples/sink_window.flash --shape B=1,H=2,HKV=2,N=700,M=700,D=128 --gemm mma.sync
echo "walk check failures: $fails" | tee "$OUT/walk-checks.txt"

echo "== flashc sink + window and prefix-LM (B=1, H=16; sink 4, window 256, prefix 1024)"
echo "name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/flashc-masks.csv"
for D in 64 128; do
  for N in 8192 16384 32768; do
    "$FR" examples/sink_window.flash --shape B=1,H=16,N=$N,D=$D --csv 2>&1 | tail -1 | tee -a "$OUT/flashc-masks.csv"
    "$FR" examples/prefix_lm.flash --shape B=1,H=16,N=$N,D=$D --param prefix=1024 --csv 2>&1 | tail -1 | tee -a "$OUT/flashc-masks.csv"
  done
  # The warp-specialized walk (the default tile is the 64 x 64 one).
  "$FR" examples/sink_window.flash --shape B=1,H=16,N=16384,D=$D --tile Br=128,Bc=128 --csv 2>&1 | tail -1 | sed 's/^sink_window/sink_window_ws/' | tee -a "$OUT/flashc-masks.csv"
done
echo "== dense causal row (regression)"
"$FR" examples/causal.flash --shape B=1,H=16,N=16384,D=128 --causal --csv 2>&1 | tail -1 | tee "$OUT/flashc-causal.csv"

echo "== peers (FlexAttention with a BlockMask, same call)"
for m in sink_window prefix_lm; do
  timeout 240 python3 .device-carry/peers_masks.py masks --masks $m --N 8192,16384,32768 --D 64,128 --H 16 2>&1 | grep -E "^peer|^flex" | tee -a "$OUT/peers-masks.csv"
done

echo "== table: flashc vs Flex, ms"
echo "mask D N flashc flex flex/flashc"
for m in sink_window prefix_lm; do for D in 64 128; do for N in 8192 16384 32768; do
  a=$(awk -F, -v n=$N -v d=$D -v m=$m '$1==m && $6==n && $8==d {print $10}' "$OUT/flashc-masks.csv")
  x=$(awk -F, -v n=$N -v d=$D -v m=$m '$1=="flex" && $2==m && $5==n && $6==d {print $7}' "$OUT/peers-masks.csv")
  r=$(python3 -c "print(f'{float(\"$x\")/float(\"$a\"):.2f}')" 2>/dev/null || echo "?")
  echo "$m $D $N $a $x $r"
done; done; done | tee "$OUT/table.txt"
grep sink_window_ws "$OUT/flashc-masks.csv" | awk -F, '{print "sink_window, warp-specialized 128x128 walk, D=" $8 " N=" $6 ": " $10 " ms"}' | tee -a "$OUT/table.txt"
