#!/usr/bin/env bash
# Device calls for the dynamic tile scheduler of the persistent grid
# (issue 15, deliverable 3).
#   bench/scheduler.sh checks   (one call)
#     1. persistent kernels against the interpreter (the checked launch is
#        each kernel's second on its stream: the first must leave the tile
#        counter at zero), more tiles than CTAs, masks that skip, walk and
#        read a block summary;
#     2. compute-sanitizer (memcheck, racecheck, synccheck) on one;
#     3. packed documents (20 docs) over tiles and grids, FlexAttention
#        with a BlockMask in the same call.
#   bench/scheduler.sh recheck  (one call, after a change: the checks and
#     the sanitizer, then the short queries beside the static schedule)
#   bench/scheduler.sh quick    (after a change to the draw: five checks,
#     memcheck and racecheck, causal 16k and unmasked 512 beside one CTA
#     per tile)
#   bench/scheduler.sh grid     (one call)
#     the dense forward timed on the persistent grid with the dynamic
#     schedule and on one CTA per tile (these tools) and, where
#     .device-carry/flashc-tools-before.tar.xz exists (flash-run of the
#     commit before), on the static schedule it replaces; SDPA's cuDNN
#     backend on the same shapes in the same call.
# Expects .device-carry/flashc-tools.tar.xz (flash-run of these sources),
# .device-carry/peers.py (shared/bench/peers.py) and
# .device-carry/peers_masks.py (shared/bench/peers_infer.py with a --masks
# filter: Flex one mask per process). Tables last.
set -u
T=$(mktemp -d)
mkdir -p "$T/new" "$T/old"
tar -C "$T/new" -xJf .device-carry/flashc-tools.tar.xz
NEW="$T/new/flash-run"
OLD=
if [ -f .device-carry/flashc-tools-before.tar.xz ]; then
  tar -C "$T/old" -xJf .device-carry/flashc-tools-before.tar.xz
  OLD="$T/old/flash-run"
fi
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1

PART=${1:-all}

# A check passes when flash-run does and its kernel is on the persistent grid.
check() {
  out=$(timeout 90 "$NEW" "$@" --persistent=true --iters 0 2>&1); rc=$?
  if [ $rc -eq 0 ] && echo "$out" | grep -q "warp-specialized tiles: persistent" &&
     ! echo "$out" | grep -q "one CTA per tile after all"; then
    echo "ok   $*"
  else
    echo "FAIL $* (exit $rc)"; echo "$out" | tail -5
  fi
}

if [ "$PART" = checks ] || [ "$PART" = recheck ] || [ "$PART" = all ]; then
echo "== persistent kernels vs the interpreter"
{
  check examples/causal.flash --shape B=3,H=5,N=1500,D=128
  check examples/causal.flash --shape B=3,H=5,N=1500,D=64 --tile Br=128,Bc=128
  check examples/causal.flash --shape B=2,H=3,N=777,D=256 --tile Br=128,Bc=64
  # More tiles than CTAs at a shape the interpreter checks whole.
  check examples/causal.flash --shape B=8,H=16,N=512,D=64 --tile Br=128,Bc=128
  check examples/full.flash --shape B=7,H=16,N=384,D=128
  check examples/full.flash --shape B=2,H=6,HKV=3,N=1000,M=1337,D=128
  check examples/sliding_window.flash --shape B=2,H=8,HKV=2,N=3000,D=128
  check examples/gqa.flash --shape B=2,H=8,HKV=2,N=1100,D=128
  check examples/alibi.flash --shape B=2,H=4,N=900,D=128
  check examples/softcap.flash --shape B=2,H=4,N=900,D=128
  check examples/prefix_lm.flash --shape B=2,H=4,N=2000,D=128 --param prefix=300
  check examples/document.flash --shape B=2,H=4,N=3000,D=128 --docs 7
  check examples/key_padding.flash --shape B=3,H=4,N=1000,D=128
  check examples/sink_window.flash --shape B=2,H=4,N=2000,D=128 --tile Br=128,Bc=128
  check examples/causal.flash --shape B=2,H=4,N=1000,D=128 --layout bshd
} 2>&1 | tee "$OUT/checks.txt"
grep -c "^FAIL" "$OUT/checks.txt" | sed 's/$/ checks failed/'

echo "== compute-sanitizer (persistent causal, D = 128, 40 tiles on the grid)"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  timeout 150 "$sanitizer" --tool $tool "$NEW" examples/causal.flash --shape B=2,H=4,N=700,D=128 \
    --persistent=true --iters 0 > "$T/san.log" 2>&1
  echo "$tool causal persistent: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$T/san.log" | tail -1)" | tee -a "$OUT/sanitizer.txt"
done

fi

if [ "$PART" = checks ] || [ "$PART" = all ]; then
echo "== packed documents (B=1, H=16, 20 docs): tiles and grids"
echo "config,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/docs.csv"
for D in 64 128; do for N in 8192 16384 32768; do
  if [ $D -eq 64 ]; then
    configs="default 128x128p 128x64p 64x64"
  else
    configs="default 128x96p 128x128p 128x64p 64x64"
  fi
  for config in $configs; do
    case $config in
      default) flags= ;;
      64x64) flags="--tile Br=64,Bc=64" ;;
      *p) t=${config%p}; flags="--tile Br=${t%x*},Bc=${t#*x} --persistent=true" ;;
    esac
    # shellcheck disable=SC2086
    row=$(timeout 90 "$NEW" examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 20 $flags --iters 30 --csv 2>&1 | tail -1)
    echo "$config,$row" | tee -a "$OUT/docs.csv"
  done
done; done
echo "== Flex with a BlockMask (documents, same call)"
PYTHONUNBUFFERED=1 timeout 300 python3 .device-carry/peers_masks.py masks --masks document \
  --N 8192,16384,32768 --D 64,128 --H 16 --docs 20 2>&1 | grep -E "^peer|^flex" | tee "$OUT/flex-docs.csv"
echo "== table: documents, ms (summary included) and Flex/flashc"
for D in 64 128; do for N in 8192 16384 32768; do
  x=$(awk -F, -v n=$N -v d=$D '$1=="flex" && $5==n && $6==d {print $7}' "$OUT/flex-docs.csv")
  awk -F, -v n=$N -v d=$D -v x="$x" '$7==n && $9==d {r = (x != "" && $11 > 0) ? sprintf("%.2f", x / $11) : "?";
    printf "%s D=%s N=%s %s ms (summary %s) flex %s ratio %s\n", $1, d, n, $11, $15, x, r}' "$OUT/docs.csv"
done; done | tee "$OUT/docs-table.txt"
echo "checks: $(grep -c '^ok' "$OUT/checks.txt") passed, $(grep -c '^FAIL' "$OUT/checks.txt") failed"
cat "$OUT/sanitizer.txt"
fi

# The follow-up call: the checks and the sanitizer again, then the short
# queries and 16k beside one CTA per tile (and the static schedule where
# the tools before are there), SDPA's cuDNN backend in the same call.
if [ "$PART" = recheck ]; then
PYTHONUNBUFFERED=1 timeout 200 python3 .device-carry/peers.py --hdims 128,256 --seqs 512,2048,16384 \
  --peers sdpa-cudnn > "$OUT/peers.csv" 2> "$OUT/peers.log"
echo "== short queries (static schedule beside), 16k (one CTA per tile beside)"
echo "config,causal,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/flashc.csv"
for D in 128 256; do
  H=$((2048 / D))
  tile=; [ $D -eq 256 ] && tile="--tile Br=128,Bc=64"
  for N in 512 2048 16384; do
    B=$((16384 / N))
    for causal in 0 1; do
      if [ $causal -eq 1 ]; then f=examples/causal.flash; c=--causal; else f=examples/full.flash; c=; fi
      configs="dynamic per-tile"; [ $N -ne 16384 ] && [ -n "$OLD" ] && configs="$configs static"
      for config in $configs; do
        case $config in
          dynamic) tool=$NEW; grid=--persistent=true ;;
          per-tile) tool=$NEW; grid=--persistent=false ;;
          static) tool=$OLD; grid=--persistent=true ;;
        esac
        # shellcheck disable=SC2086
        row=$(timeout 90 "$tool" $f --shape B=$B,H=$H,N=$N,D=$D $tile $grid $c --iters 30 --csv 2>&1 | tail -1)
        echo "$config,$causal,$row" | tee -a "$OUT/flashc.csv"
      done
    done
  done
done
echo "== table: TFLOP/s, the other grid beside"
for D in 128 256; do for N in 512 2048 16384; do for causal in 0 1; do
  cu=$(awk -F, -v k=$causal -v n=$N -v d=$D '$1=="sdpa-cudnn" && $8==k && $6==n && $7==d {print $10}' "$OUT/peers.csv")
  awk -F, -v k=$causal -v n=$N -v d=$D '$2==k && $8==n && $10==d {printf "%s=%s ", $1, $13} END {print ""}' "$OUT/flashc.csv" | sed "s/^/D=$D N=$N causal=$causal cudnn=$cu /"
done; done; done | tee "$OUT/table.txt"
echo "checks: $(grep -c '^ok' "$OUT/checks.txt") passed, $(grep -c '^FAIL' "$OUT/checks.txt") failed"
cat "$OUT/sanitizer.txt"
fi

# After a change to the draw: a few checks, memcheck and racecheck, and
# the rows that moved (causal 16k, unmasked 512) beside one CTA per tile.
if [ "$PART" = quick ]; then
{
  check examples/causal.flash --shape B=3,H=5,N=1500,D=128
  check examples/causal.flash --shape B=8,H=16,N=512,D=64 --tile Br=128,Bc=128
  check examples/full.flash --shape B=2,H=6,HKV=3,N=1000,M=1337,D=128
  check examples/document.flash --shape B=2,H=4,N=3000,D=128 --docs 7
  check examples/sink_window.flash --shape B=2,H=4,N=2000,D=128 --tile Br=128,Bc=128
} 2>&1 | tee "$OUT/checks.txt"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  timeout 100 "$sanitizer" --tool $tool "$NEW" examples/causal.flash --shape B=2,H=4,N=700,D=128 \
    --persistent=true --iters 0 > "$T/san.log" 2>&1
  echo "$tool causal persistent: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$T/san.log" | tail -1)" | tee -a "$OUT/sanitizer.txt"
done
echo "config,causal,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/flashc.csv"
for row in "128 16384 1" "256 16384 1" "128 512 0" "128 16384 0"; do
  set -- $row; D=$1; N=$2; causal=$3; H=$((2048 / D)); B=$((16384 / N))
  tile=; [ $D -eq 256 ] && tile="--tile Br=128,Bc=64"
  if [ $causal -eq 1 ]; then f=examples/causal.flash; c=--causal; else f=examples/full.flash; c=; fi
  for grid in true false; do
    # shellcheck disable=SC2086
    r=$(timeout 60 "$NEW" $f --shape B=$B,H=$H,N=$N,D=$D $tile --persistent=$grid $c --iters 30 --csv 2>&1 | tail -1)
    echo "$([ $grid = true ] && echo dynamic || echo per-tile),$causal,$r" | tee -a "$OUT/flashc.csv"
  done
done
echo "checks: $(grep -c '^ok' "$OUT/checks.txt") passed, $(grep -c '^FAIL' "$OUT/checks.txt") failed"
fi

if [ "$PART" = grid ] || [ "$PART" = all ]; then
echo "== peers (SDPA cuDNN, same call)"
SEQS=512,2048,8192,16384,32768
PYTHONUNBUFFERED=1 timeout 240 python3 .device-carry/peers.py --hdims 128,256 --seqs $SEQS \
  --peers sdpa-cudnn > "$OUT/peers.csv" 2> "$OUT/peers.log"
tail -n +2 "$OUT/peers.csv" | wc -l | sed 's/$/ peer rows/'

echo "== flashc: dynamic persistent, one CTA per tile, static persistent (before)"
echo "config,causal,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse" > "$OUT/flashc.csv"
for D in 128 256; do
  H=$((2048 / D))
  for N in ${SEQS//,/ }; do
    B=$((16384 / N)); [ $B -lt 1 ] && B=1
    tile=; [ $D -eq 256 ] && tile="--tile Br=128,Bc=64"
    for causal in 0 1; do
      if [ $causal -eq 1 ]; then f=examples/causal.flash; c=--causal; else f=examples/full.flash; c=; fi
      configs="dynamic per-tile"; [ -n "$OLD" ] && configs="$configs static"
      for config in $configs; do
        case $config in
          dynamic) tool=$NEW; grid=--persistent=true ;;
          per-tile) tool=$NEW; grid=--persistent=false ;;
          static) tool=$OLD; grid=--persistent=true ;;
        esac
        # shellcheck disable=SC2086
        row=$(timeout 90 "$tool" $f --shape B=$B,H=$H,N=$N,D=$D $tile $grid $c --iters 30 --csv 2>&1 | tail -1)
        echo "$config,$causal,$row" | tee -a "$OUT/flashc.csv"
      done
    done
  done
done

echo "== table: TFLOP/s (D=256 at Br=128, Bc=64, the tile all three grids take)"
echo "D N causal dynamic per-tile static cudnn dyn/tile dyn/static dyn/cudnn"
for D in 128 256; do for N in ${SEQS//,/ }; do for causal in 0 1; do
  get() { awk -F, -v c=$1 -v k=$causal -v n=$N -v d=$D '$1==c && $2==k && $8==n && $10==d {print $13}' "$OUT/flashc.csv"; }
  dyn=$(get dynamic); pt=$(get per-tile); st=$(get static)
  cu=$(awk -F, -v k=$causal -v n=$N -v d=$D '$1=="sdpa-cudnn" && $8==k && $6==n && $7==d {print $10}' "$OUT/peers.csv")
  python3 -c "
d,p,s,c=[float(x) if x not in ('','nan') else float('nan') for x in ('$dyn','$pt','$st','$cu')]
print(f'$D $N $causal {d:.1f} {p:.1f} {s:.1f} {c:.1f} {d/p:.3f} {d/s:.3f} {d/c:.3f}')" 2>/dev/null \
    || echo "$D $N $causal $dyn $pt $st $cu ? ? ?"
done; done; done | tee "$OUT/table.txt"
fi
