#!/usr/bin/env bash
# Call H: racecheck details of --dq-writer; the modes' timing at N = 16k.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d); tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR=$T/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== racecheck"
for det in "" --deterministic; do
  timeout 90 $san --tool racecheck --racecheck-report all --print-limit 40 $T/flash-run examples/causal.flash --shape B=1,H=2,N=300,D=128 --dq-writer $det --bwd --iters 0 > $OUT/race$det.log 2>&1
  grep -E "hazard|Race|Write|Read|at .*0x|in .*_bwd|SUMMARY" $OUT/race$det.log | sort | uniq -c | sort -rn | head -25
done
( cd $T && $T/flashc $OLDPWD/examples/causal.flash --bwd --dq-writer --emit=ptx --shape D=128 -o $OUT/writer.ptx 2>&1 | tail -2 )
( cd $T && $T/flashc $OLDPWD/examples/causal.flash --bwd --dq-writer --deterministic --emit=ptx --shape D=128 -o $OUT/detwriter.ptx 2>&1 | tail -2 )
echo "== timing"
CASES="128:16384:causal;128:16384:full;128:16384:document;64:16384:full;64:16384:causal" MODES="default writer det det-writer" FLASH_RUN=$T/flash-run timeout 420 bench/deterministic.sh $OUT/modes > $OUT/modes.log 2>&1
cat $OUT/modes/table.txt 2>/dev/null || cat $OUT/modes/deterministic.csv
