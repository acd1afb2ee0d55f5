#!/usr/bin/env bash
# Varlen prefill (issue 16) on a GPU host, one device call: flashc's varlen
# kernel (bench/inputs/varlen_pair.flash, causal) against its dense kernel
# at equal work (--full-lengths: every sequence N long), the dense kernel
# with one CTA per tile and with cp.async copies too, the varlen kernel
# over ragged lengths (TFLOP/s of the work done; persistent and with one
# CTA per tile), and SDPA's
# cuDNN and flash backends on the dense shape (shared/bench/peers.py; no
# SDPA backend takes a varlen batch). B·N = 16384 tokens, H·D = 2048.
# Every flashc row is validated against the interpreter first.
#   bench/varlen.sh [D list] [N list]
# Needs .device-carry/flashc-tools.tar.xz; peers.py from ../shared/bench or
# .device-carry/peers.py. Writes $OUT/flashc.csv, peers.csv, table.md.
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
DS=${1:-64 128}
NS=${2:-1024 2048 4096 8192}
PEERS=${PEERS:-../shared/bench/peers.py}
[ -f "$PEERS" ] || PEERS=.device-carry/peers.py
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "run,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,status" > "$OUT/flashc.csv"
flashc() { # run-label, flash-run arguments...
  local label=$1; shift
  echo "   $label $*" >&2
  local row
  row=$(timeout 120 "$T/flash-run" bench/inputs/varlen_pair.flash "$@" --causal --csv --warmup 10 --iters 50 \
        2>> "$OUT/flashc.log")
  case "$row" in *FAIL*) echo "$label,$row" ;; "") echo "$label,ERROR" ;; *) echo "$label,$row,ok" ;; esac \
    >> "$OUT/flashc.csv"
}
echo "peer,dir,dtype,B,H,N,D,causal,ms,tflops,maxerr_vs_fp32" > "$OUT/peers.csv"
for D in $DS; do
  H=$((2048 / D))
  for N in $NS; do
    B=$((16384 / N))
    shape="B=$B,H=$H,HKV=$H,N=$N,D=$D"
    flashc dense --variant dense_causal --shape "$shape"
    flashc dense-tiles --variant dense_causal --shape "$shape" --persistent=false
    flashc dense-cpasync --variant dense_causal --shape "$shape" --kv-copy cp.async
    flashc varlen-full --variant varlen_causal --shape "$shape" --full-lengths
    flashc varlen-ragged --variant varlen_causal --shape "$shape"
    flashc varlen-ragged-tiles --variant varlen_causal --shape "$shape" --persistent=false
  done
  echo "== peers D=$D" >&2
  python3 "$PEERS" --hdims "$D" --seqs "$(echo $NS | tr ' ' ',')" --peers sdpa-cudnn,sdpa-flash \
    2>> "$OUT/peers.log" | awk -F, '$2 == "fwd" && $8 == 1' >> "$OUT/peers.csv"
done
# The table: per (D, N) the four flashc rows' TFLOP/s (causal count, of the
# work done) and the varlen/dense ratio at equal work (dense ms over varlen
# ms), beside the peers'.
{
  echo "| D | N | dense | dense, one CTA per tile | dense cp.async | varlen, full lengths | varlen / dense (equal work) | varlen, ragged | varlen, ragged, one CTA per tile | SDPA cuDNN | SDPA flash |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F, '
    FNR == 1 { next }
    FILENAME ~ /flashc/ { key = $9 "," $7; t[key "," $1] = $12 " " $NF; ms[key "," $1] = $11; keys[key] = 1 }
    FILENAME ~ /peers/ { p[$7 "," $6 "," $1] = $10 }
    END {
      for (k in keys) {
        split(k, a, ",")
        ratio = ms[k ",varlen-full"] > 0 ? ms[k ",dense"] / ms[k ",varlen-full"] : 0
        printf "| %s | %s | %s | %s | %s | %s | %.3fx | %s | %s | %s | %s |\n", a[1], a[2], t[k ",dense"],
          t[k ",dense-tiles"], t[k ",dense-cpasync"], t[k ",varlen-full"], ratio, t[k ",varlen-ragged"],
          t[k ",varlen-ragged-tiles"], p[k ",sdpa-cudnn"], p[k ",sdpa-flash"]
      }
    }' "$OUT/flashc.csv" "$OUT/peers.csv" | sort -t'|' -k2,2n -k3,3n
} > "$OUT/table.md"
cat "$OUT/table.md"
