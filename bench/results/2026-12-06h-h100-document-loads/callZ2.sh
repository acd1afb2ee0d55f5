#!/usr/bin/env bash
# Call Z2 (issue 15): documents at D = 128 beside Flex (base f638977, new),
# and the documents backward, base vs new (same ids), D = 64 and 128.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== documents backward (base | new, ms; B=1 H=16 20 documents)"
for D in 64 128; do for N in 8192 16384; do
  ids=$T/bids-$D-$N; line="D=$D N=$N"
  for tool in flash-run flash-run-base; do
    save=; [ -f "$ids/doc.bin" ] || save="--save-aux $ids"
    r=$(FLASHC_CACHE_DIR=$T/cache-$tool timeout 100 $T/$tool examples/document.flash --bwd --shape B=1,H=16,N=$N,D=$D --docs 20 --check-shape B=1,H=2,N=1024,D=$D $save --iters 20 --csv 2>$OUT/bwd-last.log | tail -1)
    echo "$tool,$r" >> $OUT/bwd.csv; line="$line | $tool $(echo "$r" | awk -F, '{print $11}')"
  done; echo "$line"
done; done
echo "== documents at D = 128 (base, new), Flex on the same ids"
OUT=$OUT/docs TOOLS="flash-run flash-run-base" GRIDS=default timeout 300 bash bench/documents.sh compare 128 "8192 16384 32768" > $OUT/docs.log 2>&1
echo "checks: ok $(grep -c "^ok" $OUT/docs.log), FAIL $(grep -c "^FAIL" $OUT/docs.log)"; tail -9 $OUT/docs.log
