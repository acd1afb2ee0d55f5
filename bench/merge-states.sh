#!/usr/bin/env bash
# The merge-states kernel (flashrun::StateMerger) on a GPU host, one device
# call: flashrt-tests' MergeStates tests (fp64 merge, in place, the C entry
# point), then merge-states-bench (S = 2-16 f32 states into bf16, sampled
# rows checked against fp64 first) beside the device-to-device copy rate of
# the same run. Needs .device-carry/merge-states-bench and
# .device-carry/flashrt-tests (built on the build machine: libflashrt only).
# Writes $OUT/tests.txt, $OUT/merge.csv, $OUT/copy.csv.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
.device-carry/flashrt-tests --gtest_filter='MergeStates*' > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt" >&2
python3 - > "$OUT/copy.csv" <<'PY'
import torch, triton
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=10, rep=100, return_mode="median")
# A copy reads and writes every byte.
print(f"copy_GBps,{2 * x.numel() / ms / 1e6:.0f}")
PY
for rows in 4096 262144 1048576; do
  .device-carry/merge-states-bench "$rows" 128 | { [ "$rows" = 4096 ] && cat || tail -n +2; }
done > "$OUT/merge.csv"
cat "$OUT/copy.csv" "$OUT/merge.csv"
