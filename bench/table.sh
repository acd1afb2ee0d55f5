#!/usr/bin/env bash
# The table of bench/run.sh from its two CSVs in OUTDIR (flashc-fwd.csv,
# peers-fwd.csv), on stdout: TFLOP/s per shape and flashc configuration,
# and flashc / peer ratios. Also for a run cut short by a time limit: the
# rows it reached.
#
#   TITLE="2026-11-29, H200, flashc abc123" bench/table.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: bench/table.sh OUTDIR}
for f in "$OUT/flashc-fwd.csv" "$OUT/peers-fwd.csv"; do
  [ -r "$f" ] || { echo "bench/table.sh: cannot read $f" >&2; exit 1; }
done
echo "# Forward TFLOP/s, flashc vs peers (${TITLE:-$OUT})"
echo
echo "bf16, B*N = 16384, H*D = 2048, median of CUDA-event timings; ratio = flashc / peer."
echo "flashc rows are validated against the CPU interpreter first (rel err of O shown)."
echo
echo "| D | N | causal | flashc kernel | flashc | FA2 | cuDNN | flex | /FA2 | /cuDNN | /flex | flashc rel err |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
awk -F, '
  FNR == 1 { next }
  FILENAME ~ /peers/ && $2 == "fwd" { peer[$1 "," $7 "," $6 "," $8] = $10; next }
  FILENAME ~ /flashc/ { shape = $10 "," $8 "," $2; key = $1 "," shape; order[++n] = key
                        if (NF >= 15) { mine[key] = $13; err[key] = $14 ($16 == "FAIL" ? " FAIL" : "") }
                        else err[key] = "error: " $3 }
  END {
    for (i = 1; i <= n; i++) {
      split(order[i], k, ","); shape = k[2] "," k[3] "," k[4]
      f = mine[order[i]]; fa = peer["sdpa-flash," shape]; cu = peer["sdpa-cudnn," shape]
      fx = peer["flex," shape]
      r1 = (fa > 0 && f > 0) ? sprintf("%.2f", f / fa) : "-"
      r2 = (cu > 0 && f > 0) ? sprintf("%.2f", f / cu) : "-"
      r3 = (fx > 0 && f > 0) ? sprintf("%.2f", f / fx) : "-"
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k[2], k[3], k[4], k[1], f, fa, cu, fx, r1, r2, r3, err[order[i]]
    }
  }' "$OUT/peers-fwd.csv" "$OUT/flashc-fwd.csv"
