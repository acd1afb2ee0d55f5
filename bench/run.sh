#!/usr/bin/env bash
# Forward-pass benchmark on a GPU host: flashc kernels (validated against the
# CPU interpreter, timed with CUDA events, median) and the peers of
# shared/bench/peers.py (PyTorch SDPA FA2 / cuDNN / mem-efficient,
# FlexAttention) in the same run, then one table of TFLOP/s and ratios.
#
#   FLASH_RUN=path/to/flash-run PEERS=path/to/peers.py bench/run.sh [OUTDIR]
#
# Grid: bf16, B*N = 16384 tokens, H*D = 2048; HDIMS and SEQS override.
# GEMMS: the flashc backends to time, one table row each (default
# "wgmma mma.sync" on sm_90a: flash-to-sm90 and flash-to-sm80).
# TFLOP/s: 4*B*H*N*N*D, halved when causal (the peers' count).
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
PEERS=${PEERS:-../shared/bench/peers.py}
OUT=${1:-bench/results}
HDIMS=${HDIMS:-64,128,256}
SEQS=${SEQS:-512,1024,2048,4096,8192,16384}
ITERS=${ITERS:-30}
GEMMS=${GEMMS:-wgmma mma.sync}
# EXTRA: one more flashc configuration, "label:flags" (flags comma-separated,
# the wgmma kernel), timed at the head dims in EXTRA_HDIMS only; e.g.
# EXTRA="wgmma/grid:--persistent=false" EXTRA_HDIMS=128,256.
EXTRA=${EXTRA:-}
EXTRA_HDIMS=${EXTRA_HDIMS:-$HDIMS}
mkdir -p "$OUT"
stamp=$(date -u +%Y-%m-%d)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=${FLASHC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
flashc_csv=$OUT/flashc-fwd.csv
peers_csv=$OUT/peers-fwd.csv

# The peers first: a run cut by a time limit still has them beside the
# flashc rows it reached.
echo "peers: PyTorch SDPA (FA2, cuDNN) on the grid..." >&2
python3 "$PEERS" --hdims "$HDIMS" --seqs "$SEQS" --peers sdpa-flash,sdpa-cudnn \
  > "$peers_csv" 2> "$OUT/peers-fwd.log"
# FlexAttention compiles per shape through torch.compile (tens of seconds
# each): measured at FLEX_HDIMS x FLEX_SEQS only.
FLEX_HDIMS=${FLEX_HDIMS:-128}
FLEX_SEQS=${FLEX_SEQS:-1024,4096,16384}
if [ -n "$FLEX_SEQS" ]; then
  echo "peers: FlexAttention at D=$FLEX_HDIMS, N=$FLEX_SEQS..." >&2
  python3 "$PEERS" --hdims "$FLEX_HDIMS" --seqs "$FLEX_SEQS" --peers flex 2>> "$OUT/peers-fwd.log" \
    | tail -n +2 >> "$peers_csv"
fi

echo "gemm,causal,variant,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_err_o,rel_err_lse,status" > "$flashc_csv"
total=$(( $(echo "$HDIMS" | tr ',' '\n' | wc -l) * $(echo "$SEQS" | tr ',' '\n' | wc -l) * 2 * $(echo $GEMMS | wc -w) ))
[ -n "$EXTRA" ] && total=$(( total + $(echo "$EXTRA_HDIMS" | tr ',' '\n' | wc -l) * $(echo "$SEQS" | tr ',' '\n' | wc -l) * 2 ))
n=0
for D in ${HDIMS//,/ }; do
  H=$((2048 / D))
  for N in ${SEQS//,/ }; do
    B=$((16384 / N)); [ $B -lt 1 ] && B=1
    for causal in 0 1; do
      configs=$GEMMS
      [ -n "$EXTRA" ] && [[ ",$EXTRA_HDIMS," == *",$D,"* ]] && configs="$configs $EXTRA"
      for config in $configs; do
        n=$((n + 1))
        label=${config%%:*}; extra=; [[ $config == *:* ]] && extra=${config#*:}
        gemm=${label%%/*}
        if [ $causal -eq 1 ]; then file=examples/causal.flash; flag=--causal; else file=examples/full.flash; flag=; fi
        echo "[$n/$total] flashc $label D=$D N=$N causal=$causal" >&2
        row=$(timeout "${ROW_TIMEOUT:-120}" "$FLASH_RUN" "$file" --shape "B=$B,H=$H,N=$N,D=$D" --gemm "$gemm" ${extra//,/ } --csv --iters "$ITERS" $flag 2>&1 | tail -1)
        echo "$label,$causal,$row" >> "$flashc_csv"
      done
    done
  done
done

TITLE="$stamp, $gpu, driver $driver, flashc $commit" bench/table.sh "$OUT" | tee "$OUT/fwd-table.md"
