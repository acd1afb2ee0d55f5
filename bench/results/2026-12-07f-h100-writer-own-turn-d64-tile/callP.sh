#!/usr/bin/env bash
# Call P (issue 14): the dQ writer that takes its CTA's own turn (no turns
# in the record where no dQ loop has a classified mask: full masks ordered
# by default at D = 128 / 256 and at D = 64 above N = 8192, and every
# unmasked variant under --deterministic), and the D = 64 unmasked tile at
# N = 513-2048. GPU checks against the interpreter (bitwise over 3 runs
# where deterministic), compute-sanitizer, old (HEAD~ tools) vs new ms in
# the same call, D = 64 rows beside the peers, SASS, then gpu-fuzz of the
# 128 x 128 tile (fuzz7). Tables last.
set -u
cd "$(dirname "$0")/.."
NEW=$(mktemp -d); tar -C $NEW -xJf .device-carry/flashc-tools-new.tar.xz
OLD=$(mktemp -d); tar -C $OLD -xJf .device-carry/flashc-tools.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
echo "== GPU checks (new)"
chk() { local name=$1; shift
  FLASHC_CACHE_DIR=$NEW/cache timeout 120 $NEW/flash-run "$@" --iters 0 > $NEW/chk.log 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; tail -5 $NEW/chk.log; fi
  cat $NEW/chk.log >> $OUT/checks.log; }
{
chk full128 examples/full.flash --bwd --shape B=2,H=3,N=1000,D=128
chk full128-det-gqa examples/full.flash --bwd --deterministic --shape B=2,H=4,HKV=2,N=777,M=1200,D=128
chk full64-det examples/full.flash --bwd --deterministic --shape B=2,H=3,N=3000,D=64
chk full64-9000 examples/full.flash --bwd --shape B=1,H=2,N=9000,D=64
chk full256 examples/full.flash --bwd --shape B=1,H=2,N=700,D=256
chk full256-det examples/full.flash --bwd --deterministic --shape B=2,H=2,N=650,M=900,D=256
chk softcap128-det examples/softcap.flash --bwd --deterministic --shape B=1,H=2,N=900,D=128
chk relbias128-det examples/relative_bias.flash --bwd --deterministic --shape B=1,H=2,N=600,D=128
chk causal128-det examples/causal.flash --bwd --deterministic --shape B=2,H=2,N=1000,D=128
chk full64-1024 examples/full.flash --bwd --shape B=2,H=4,N=1024,D=64
chk full64-700 examples/full.flash --bwd --shape B=3,H=2,HKV=1,N=700,M=650,D=64
chk full64-2048-bshd examples/full.flash --bwd --layout bshd --shape B=1,H=4,N=2048,D=64
} | tee $OUT/checks.txt
echo "== compute-sanitizer (new, full D = 128 --deterministic, small)"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do
  FLASHC_CACHE_DIR=$NEW/cache timeout 150 $SAN --tool $tool $NEW/flash-run examples/full.flash --bwd --deterministic --shape B=1,H=2,N=300,D=128 --iters 0 > $OUT/san-$tool.log 2>&1
  echo "$tool exit $? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/san-$tool.log | head -2 | tr '\n' ' ')"
done | tee $OUT/sanitizer.txt
echo "== old | new ms, two rounds"
for s in "full 128 4096 " "full 128 16384 " "full 64 16384 " "full 128 4096 --deterministic"; do
  set -- $s; ex=$1; D=$2; N=$3; mode=${4:-}; B=$((16384 / N)); H=$((2048 / D)); line="$ex D=$D N=$N $mode"
  for round in 1 2; do for tool in OLD NEW; do dir=${!tool}
    r=$(FLASHC_CACHE_DIR=$dir/cache timeout 90 $dir/flash-run examples/$ex.flash --bwd $mode --csv --shape B=$B,H=$H,N=$N,D=$D --iters 30 2>$dir/last.log | tail -1)
    ms=$(echo "$r" | awk -F, '{print $11}'); [ -n "$ms" ] || { ms=FAIL; tail -2 $dir/last.log; }
    echo "$ex,$D,$N,$mode,$tool,$round,$ms" >> $OUT/oldnew.csv; line="$line | $tool $ms"
  done; done; echo "$line"
done | tee $OUT/oldnew.txt
echo "== D = 64 full N = 1024 / 2048 (new default) beside the peers"
for N in 1024 2048; do FLASHC_CACHE_DIR=$NEW/cache timeout 60 $NEW/flash-run examples/full.flash --bwd --csv --shape B=$((16384 / N)),H=32,N=$N,D=64 --iters 30 2>>$OUT/rows.log | tail -1; done | tee $OUT/rows.csv
timeout 90 python3 .device-carry/peers.py --bwd --hdims 64 --seqs 1024,2048 --peers sdpa-cudnn,sdpa-flash 2>>$OUT/rows.log | grep ',bwd,' | tee -a $OUT/rows.csv
echo "== SASS (new)"
for p in .device-carry/ptxP/*.ptx; do n=$(basename $p .ptx)
  /usr/local/cuda/bin/ptxas -arch=sm_90a $p -o $NEW/$n.cubin || continue
  main=$(grep -o '\.entry [a-z_0-9]*_bwd(' $p | head -1 | sed 's/.entry //; s/(//')
  /usr/local/cuda/bin/cuobjdump --dump-sass --function $main $NEW/$n.cubin > $NEW/$n.sass 2>&1
  echo "$n $main HGMMA=$(grep -c HGMMA $NEW/$n.sass) STL=$(grep -c STL $NEW/$n.sass) LDL=$(grep -c LDL $NEW/$n.sass)"
done | tee $OUT/sass.txt
echo "== gpu-fuzz (new): 160 backward cases at D = 64 on 128 x 128"
FLASH_RUN=$NEW/flash-run JOBS=8 CASE_TIMEOUT=40 timeout 80 bash scripts/gpu-fuzz.sh .device-carry/fuzz7 > $OUT/fuzz7.log 2>&1; tail -1 $OUT/fuzz7.log
echo "== tables"; cat $OUT/checks.txt $OUT/sanitizer.txt $OUT/oldnew.txt $OUT/rows.csv $OUT/sass.txt
