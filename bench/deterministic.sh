#!/usr/bin/env bash
# Deterministic backward beside the default on a GPU host: for each shape,
# flash-run --bwd (validated against the interpreter first, then CUDA-event
# median; --deterministic also checks dQ bitwise over 3 runs) in the modes
# of MODES, same flash-run, same run, then one table of milliseconds and
# each mode's time over the default's. No peer has the mode.
#
#   FLASH_RUN=path/to/flash-run bench/deterministic.sh [OUTDIR]
#
# MODES (default "default det det-own rotate"): default = no flag, det =
# --deterministic, det-defer = --deterministic --defer-turns, writer =
# --dq-writer, det-writer = --deterministic --dq-writer (what --deterministic
# takes at D >= 96), det-own = --deterministic --dq-writer=false, rotate =
# --bwd-rotate-tiles. CASES:
# ';'-separated "D:N:example[:extra flash-run args]" (bf16, B·N = 16384,
# H·D = 2048; causal takes --causal so TFLOP/s halve).
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
OUT=${1:-bench/results/deterministic}
ITERS=${ITERS:-12}
MODES=${MODES:-default det det-own rotate}
CASES=${CASES:-128:4096:causal;128:4096:full;128:16384:causal;128:16384:full;128:16384:sliding_window:--param window=1024;128:16384:document;64:16384:causal;64:16384:full}
mkdir -p "$OUT"
csv=$OUT/deterministic.csv
echo "mode,variant,dtype,B,H,HKV,N,M,D,layout,dir,ms,tflops,rel_dq,rel_dk,rel_dv" > "$csv"
IFS=';' read -ra cases <<< "$CASES"
for c in "${cases[@]}"; do
  IFS=':' read -r D N example extra <<< "$c"
  H=$((2048 / D)) B=$((16384 / N))
  [ "$example" = causal ] && extra="$extra --causal"
  for mode in $MODES; do
    case $mode in
      default) flags= ;;
      det) flags=--deterministic ;;
      det-defer) flags="--deterministic --defer-turns" ;;
      writer) flags=--dq-writer ;;
      det-writer) flags="--deterministic --dq-writer" ;;
      det-own) flags="--deterministic --dq-writer=false" ;;
      rotate) flags=--bwd-rotate-tiles ;;
      *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    echo "[$mode] $example D=$D N=$N" >&2
    # shellcheck disable=SC2086
    row=$(timeout 120 "$FLASH_RUN" "examples/$example.flash" --bwd $flags $extra --csv \
          --shape "B=$B,H=$H,N=$N,D=$D" --iters "$ITERS" 2> "$OUT/last.log" | tail -1)
    [ -n "$row" ] || { echo "  failed:"; tail -5 "$OUT/last.log"; row="$example,,,,,,,,,,,"; }
    echo "$mode,$row" >> "$csv"
  done
done
rm -f "$OUT/last.log"
# One line per (variant, D, N): each mode's ms and its time over the default's.
awk -F, 'NR > 1 { key = $2 " D=" $9 " N=" $7; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
                  ms[key, $1] = $12; if ($1 == "default") base[key] = $12 }
         END { printf "%-32s", "case"; split(modes, m, " ")
               for (i = 1; i in m; ++i) printf " %16s", m[i]; printf "\n"
               for (k = 1; k <= n; ++k) { key = order[k]; printf "%-32s", key
                 for (i = 1; i in m; ++i) { v = ms[key, m[i]]
                   if (v == "") printf " %16s", "-"
                   else if (base[key] > 0) printf " %8.3f (%.2fx)", v, v / base[key]
                   else printf " %16.3f", v }
                 printf "\n" } }' modes="$MODES" "$csv" | tee "$OUT/table.txt"
