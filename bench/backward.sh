#!/usr/bin/env bash
# Backward-pass benchmark on a GPU host: flashc's backward (flash-run --bwd:
# validated against the interpreter first, then timed with CUDA events,
# median, from the forward's own O and LSE) and the peers' backward of
# shared/bench/peers.py --bwd (PyTorch SDPA FA2 / cuDNN, FlexAttention) in
# the same run, then one table of TFLOP/s and ratios.
#
#   FLASH_RUN=path/to/flash-run PEERS=path/to/peers.py bench/backward.sh [OUTDIR]
#   PASS=train ... bench/backward.sh [OUTDIR]
#
# PASS=train times one training step's attention instead, the forward and
# then the backward from its O and LSE as one pair: flash-run --bwd
# --train-step beside bench/peers_train.py (SDPA's pair), 3.5x the forward's
# FLOPs.
#
# Grid: bf16, B*N = 16384 tokens, H*D = 2048 (HDIMS, SEQS override);
# PEER_LIST (default sdpa-flash,sdpa-cudnn). TFLOP/s: 2.5 x 4*B*H*N*N*D,
# halved when causal (the peers' count).
set -uo pipefail
cd "$(dirname "$0")/.."
FLASH_RUN=${FLASH_RUN:-flash-run}
PEERS=${PEERS:-../shared/bench/peers.py}
[ -f "$PEERS" ] || PEERS=.device-carry/peers.py   # on a device host without ../shared
OUT=${1:-bench/results/backward}
HDIMS=${HDIMS:-64,128}
SEQS=${SEQS:-1024,4096,16384}
ITERS=${ITERS:-20}
PEER_LIST=${PEER_LIST:-sdpa-flash,sdpa-cudnn}
PASS=${PASS:-bwd}
mkdir -p "$OUT"
echo "peers: $PEER_LIST $PASS on the grid..." >&2
if [ "$PASS" = train ]; then
  python3 bench/peers_train.py --hdims "$HDIMS" --seqs "$SEQS" --peers "$PEER_LIST" \
    > "$OUT/peers-$PASS.csv" 2> "$OUT/peers-$PASS.log"
  step=--train-step
else
  python3 "$PEERS" --bwd --hdims "$HDIMS" --seqs "$SEQS" --peers "$PEER_LIST" \
    > "$OUT/peers-$PASS.csv" 2> "$OUT/peers-$PASS.log"
  step=
fi
echo "variant,dtype,B,H,HKV,N,M,D,layout,dir,ms,tflops,rel_dq,rel_dk,rel_dv" > "$OUT/flashc-$PASS.csv"
for D in ${HDIMS//,/ }; do
  H=$((2048 / D))
  for N in ${SEQS//,/ }; do
    B=$((16384 / N)); [ $B -lt 1 ] && B=1
    for causal in 0 1; do
      if [ $causal -eq 1 ]; then f=examples/causal.flash; flag=--causal; else f=examples/full.flash; flag=; fi
      echo "flashc: $f B=$B H=$H N=$N D=$D" >&2
      "$FLASH_RUN" "$f" --bwd $step --csv --shape "B=$B,H=$H,N=$N,D=$D" $flag --iters "$ITERS" \
        2>> "$OUT/flashc-$PASS.log" | grep ",$PASS," >> "$OUT/flashc-$PASS.csv"
    done
  done
done
# Table: flashc backward TFLOP/s and its ratio to each peer, per shape.
python3 - "$OUT" "$PASS" <<'PY'
import csv, sys, os
out, step = sys.argv[1], sys.argv[2]
peers = {}
for r in csv.DictReader(open(os.path.join(out, f"peers-{step}.csv"))):
    if r["dir"] == step:
        peers[(r["peer"], int(r["N"]), int(r["D"]), int(r["causal"]))] = float(r["tflops"])
names = sorted({k[0] for k in peers})
rows = [f"| D | N | causal | flashc {step} TFLOP/s | " + " | ".join(f"{n} | ratio" for n in names) + " | check |",
        "|---|---|---|---|" + "---|---|" * len(names) + "---|"]
for r in csv.DictReader(open(os.path.join(out, f"flashc-{step}.csv"))):
    causal = int(r["variant"] == "causal")
    N, D, t = int(r["N"]), int(r["D"]), float(r["tflops"])
    ok = "ok" if r.get(None) is None else "FAIL"
    cells = []
    for n in names:
        p = peers.get((n, N, D, causal))
        cells.append(f"{p:.1f} | {t / p:.2f}x" if p else "- | -")
    rows.append(f"| {D} | {N} | {causal} | {t:.1f} | " + " | ".join(cells) + f" | {ok} dQ {r['rel_dq']} |")
table = "\n".join(rows)
open(os.path.join(out, "table.md" if step == "bwd" else f"table-{step}.md"), "w").write(table + "\n")
print(table)
PY
