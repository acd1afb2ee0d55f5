#!/usr/bin/env bash
# Decode (issue 16) on a GPU host, one device call: flashc's decode kernel
# (examples/gqa.flash at N = 1: every key visible; split keys and packed
# GQA by default) beside SDPA's
# flash and cuDNN backends (shared/bench/peers_infer.py decode) on the same
# shapes, K + V bytes read per second; the device-to-device copy rate of
# the same run as the ceiling. Every flashc row is validated against the
# interpreter first (flash-run's check; FAIL rows are marked).
#   bench/decode.sh [B list] [M list] [H/HKV list]
#   SWEEP="B/H/HKV/M ..." adds flash-run --splits 1..128 at those shapes;
#   UNPACKED="B/H/HKV/M ..." the same shapes with --pack-gqa=false;
#   PAGED="B/H/HKV/M ..." the same decode over a paged K/V cache of PAGES
#   (default "16 64") keys per page, every sequence M keys long
#   (bench/inputs/paged_gqa.flash --full-lengths), beside the dense kernel
#   with TMA and with cp.async copies: what paging costs (PAGES_IN_ORDER,
#   PAGES_GATHERED: the same pages consecutive, or gathered by cp.async).
# Needs .device-carry/flashc-tools.tar.xz (flash-run) and
# .device-carry/peers_infer.py (a copy of shared/bench/peers_infer.py).
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BS=${1:-1 8 32 128}
MS=${2:-2048 8192 32768 131072}
GROUPS_LIST=${3:-32/8 64/8 32/32}
MAX_TOKENS=${MAX_TOKENS:-4194304}
PEERS=${PEERS:-../shared/bench/peers_infer.py}
[ -f "$PEERS" ] || PEERS=.device-carry/peers_infer.py
comma() { echo "$1" | tr ' ' ','; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1

echo "== copy rate" >&2
python3 - > "$OUT/copy.csv" <<'EOF'
import torch, triton
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=10, rep=100, return_mode="median")
# A copy reads and writes every byte.
print(f"copy_GBps,{2 * x.numel() / ms / 1e6:.0f}")
EOF

echo "peer,mode,B,H,HKV,M,D,ms,GBps" > "$OUT/peers.csv"
echo "name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,splits,GBps,status" > "$OUT/flashc.csv"
# One discarded flashc run first: the first row of a call once read 534
# GB/s where the same tool read 665-682 in another call's repeated rounds
# (bench/results/2026-12-07h-h100-split-merge-in-place).
set -- $BS; first_b=$1; set -- $MS; first_m=$1; set -- $GROUPS_LIST; first_g=$1
timeout 90 "$T/flash-run" examples/gqa.flash --iters 50 \
  --shape B=$first_b,H=${first_g%/*},HKV=${first_g#*/},N=1,M=$first_m,D=128 > /dev/null 2>&1
for group in $GROUPS_LIST; do
  H=${group%/*}; HKV=${group#*/}
  echo "== peers H=$H HKV=$HKV" >&2
  python3 "$PEERS" decode --B "$(comma "$BS")" --M "$(comma "$MS")" --H "$H" --HKV "$HKV" \
    --D 128 --peers sdpa-flash,sdpa-cudnn --max-tokens "$MAX_TOKENS" 2>> "$OUT/peers.log" \
    | tail -n +2 >> "$OUT/peers.csv"
  for B in $BS; do for M in $MS; do
    [ $((B * M)) -le "$MAX_TOKENS" ] || continue
    echo "   flashc B=$B H=$H HKV=$HKV M=$M" >&2
    row=$(timeout 90 "$T/flash-run" examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 \
          --csv --warmup 20 --iters 100 2>> "$OUT/flashc.log")
    case "$row" in *FAIL*) echo "$row" >> "$OUT/flashc.csv" ;;
                   "") echo "gqa,bf16,$B,$H,$HKV,1,$M,128,bhsd,nan,nan,nan,nan,nan,nan,ERROR" >> "$OUT/flashc.csv" ;;
                   *) echo "$row,ok" >> "$OUT/flashc.csv" ;; esac
  done; done
done

# What packing the query heads of a KV group bought: the same shapes with
# --pack-gqa=false (UNPACKED="B/H/HKV/M ...").
if [ -n "${UNPACKED:-}" ]; then
  echo "shape,packed_GBps,unpacked_GBps,unpacked_splits,status" > "$OUT/unpacked.csv"
  for s in $UNPACKED; do
    IFS=/ read -r B H HKV M <<< "$s"
    packed=$(grep "^gqa,bf16,$B,$H,$HKV,1,$M," "$OUT/flashc.csv" | cut -d, -f15)
    row=$(timeout 60 "$T/flash-run" examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 \
          --pack-gqa=false --csv --warmup 20 --iters 100 2>> "$OUT/unpacked.log")
    echo "$s,${packed:-nan},$(echo "$row" | cut -d, -f15),$(echo "$row" | cut -d, -f14),$(case "$row" in *FAIL*) echo FAIL;; "") echo ERROR;; *) echo ok;; esac)" >> "$OUT/unpacked.csv"
  done
fi

if [ -n "${PAGED:-}" ]; then
  pages=${PAGES:-16 64}
  # PAGES_IN_ORDER: pages whose run is repeated with each sequence's pages
  # consecutive (flash-run --pages-in-order): what the shuffle costs.
  ordered=${PAGES_IN_ORDER:-}
  # PAGES_GATHERED: pages whose run is repeated with --kv-copy cp.async (the
  # gather instead of TMA boxes): what the boxes buy.
  gathered=${PAGES_GATHERED:-}
  echo "shape,dense_tma_GBps,dense_cpasync_GBps$(for p in $pages; do printf ',paged%s_GBps' $p; done)$(for p in $ordered; do printf ',paged%s_in_order_GBps' $p; done)$(for p in $gathered; do printf ',paged%s_gathered_GBps' $p; done),status" > "$OUT/paged.csv"
  for s in $PAGED; do
    IFS=/ read -r B H HKV M <<< "$s"
    shape=B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128
    status=ok; line="$s"
    for args in "examples/gqa.flash" "examples/gqa.flash --kv-copy cp.async" \
                $(for p in $pages; do echo "bench/inputs/paged_gqa.flash#--paged#$p#--full-lengths"; done) \
                $(for p in $ordered; do echo "bench/inputs/paged_gqa.flash#--paged#$p#--full-lengths#--pages-in-order"; done) \
                $(for p in $gathered; do echo "bench/inputs/paged_gqa.flash#--paged#$p#--full-lengths#--kv-copy#cp.async"; done); do
      row=$(timeout 90 "$T/flash-run" ${args//#/ } --shape $shape --csv --warmup 20 --iters 100 \
            2>> "$OUT/paged.log")
      case "$row" in *FAIL*) status=FAIL ;; "") status=ERROR ;; esac
      line="$line,$(echo "$row" | cut -d, -f15)"
    done
    echo "$line,$status" >> "$OUT/paged.csv"
  done
fi

if [ -n "${SWEEP:-}" ]; then
  echo "shape,splits,ms,GBps,status" > "$OUT/sweep.csv"
  for s in $SWEEP; do
    IFS=/ read -r B H HKV M <<< "$s"
    for S in 1 2 4 8 16 32 64 128; do
      row=$(timeout 60 "$T/flash-run" examples/gqa.flash --shape B=$B,H=$H,HKV=$HKV,N=1,M=$M,D=128 \
            --splits $S --csv --iters 50 2>> "$OUT/sweep.log")
      echo "$s,$S,$(echo "$row" | cut -d, -f10),$(echo "$row" | cut -d, -f15),$(case "$row" in *FAIL*) echo FAIL;; "") echo ERROR;; *) echo ok;; esac)" >> "$OUT/sweep.csv"
    done
  done
fi

# The table: flashc's GB/s against the best SDPA backend and the copy rate.
COPY=$(cut -d, -f2 "$OUT/copy.csv")
awk -F, -v copy="$COPY" '
  FNR == 1 { next }
  FILENAME ~ /peers/ { key = $3 "," $4 "," $5 "," $6; if ($9 + 0 > best[key] + 0) { best[key] = $9; who[key] = $1 } next }
  { key = $3 "," $4 "," $5 "," $7; rows[++n] = key; gbps[key] = $15; splits[key] = $14; status[key] = $16 }
  END {
    printf "| B | H/HKV | M | splits | flashc GB/s | best SDPA GB/s | flashc / best | of copy (%s GB/s) | check |\n", copy
    printf "|---|---|---|---|---|---|---|---|---|\n"
    for (r = 1; r <= n; ++r) { k = rows[r]; split(k, f, ",")
      ratio = best[k] > 0 ? gbps[k] / best[k] : 0
      printf "| %s | %s/%s | %s | %s | %.0f | %.0f (%s) | %.2fx | %.0f%% | %s |\n", f[1], f[2], f[3], f[4], splits[k], gbps[k], best[k], who[k], ratio, 100 * gbps[k] / copy, status[k] }
  }' "$OUT/peers.csv" "$OUT/flashc.csv" | tee "$OUT/table.md"
