#!/usr/bin/env bash
# Device calls for packed documents (issue 15), FlexAttention beside on the
# same inputs. Every flash-run* in .device-carry/flashc-tools.tar.xz is run
# (variants of one change, named flash-run-<variant>).
#   bench/documents.sh compare [D list] [N list]
#     1. the document kernel of each variant against the interpreter
#        (D = 64 and 128, both grids);
#     2. B = 1, H = 16, 20 documents: each variant on the default grid and
#        on the persistent one; the first run writes the document ids
#        (flash-run --save-aux) and bench/flex_aux_masks.py runs Flex with
#        a BlockMask on exactly those ids, in the same call;
#     3. a table: ms (summary included), the summary's share, Flex / flashc.
#   bench/documents.sh tiles [D list] [N list]
#     the newest variant's document kernel over tiles and grids (each
#     checked first), Flex on the same ids; with `compare,tiles` the two
#     parts share the ids and Flex's run.
#   bench/documents.sh padding [D list]
#     key padding (examples/key_padding.flash, random key lengths per batch
#     entry) at B x N = 32k tokens, Flex on the same lengths.
#   bench/documents.sh backward [D list] [N list]
#     the backward of packed documents (B = 1, H = 16, 20 documents) with
#     and without --bwd-block-summary (each checked against the
#     interpreter first, the summary's bytes too), then Flex's backward
#     with a BlockMask on the same ids (bench/flex_aux_masks.py --bwd).
#   bench/documents.sh diagnose
#     the same kernel over 20 documents, over one document (its summary
#     then says what the causal classification says) and the causal
#     kernel, D = 128, 16k and 32k: what the summary path costs per block.
#   bench/documents.sh sanitize
#     compute-sanitizer memcheck, racecheck and synccheck on the newest
#     variant's summary and attention kernels at a small shape (documents
#     on both grids, B = 2; key padding), each run checked as well.
#   bench/documents.sh profile
#     Nsight Compute (where the device lets it read counters) on the newest
#     variant's document kernel at D = 128, 16k: speed of light, warp
#     states and per-instruction stall samples (ncu-sass.csv).
set -u
T=$(mktemp -d)
tar -C "$T" -xJf .device-carry/flashc-tools.tar.xz
export FLASHC_CACHE_DIR="$T/cache"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
# Newest variant first: it writes the document ids (--save-aux) that the
# others and Flex read.
TOOLS=${TOOLS:-$(cd "$T" && ls -r flash-run* | tr '\n' ' ')}
LAST=${TOOLS%% *}
PART=${1:-compare}
DS=${2:-64 128}
NS=${3:-8192 16384 32768}
# PART may name several parts, comma-separated (compare,tiles,profile).
wants() { case ",$PART," in *",$1,"*) return 0 ;; esac; return 1; }

if wants compare; then
echo "== checks"
for tool in $TOOLS; do for D in 64 128; do for grid in false true; do
  timeout 120 "$T/$tool" examples/document.flash --shape B=2,H=4,N=3000,D=$D --docs 7 \
    --persistent=$grid --iters 0 > "$T/c.log" 2>&1 \
    && echo "ok   $tool document D=$D persistent=$grid" \
    || { echo "FAIL $tool document D=$D persistent=$grid"; tail -5 "$T/c.log"; }
done; done; done | tee "$OUT/checks.txt"

echo "== documents: flashc variants, then Flex on the same ids"
echo "tool,grid,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/docs.csv"
echo "peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms" > "$OUT/flex.csv"
for D in $DS; do for N in $NS; do
  ids="$T/ids-$D-$N"
  # GRIDS=default leaves out the persistent rows (the tiles part has them).
  for tool in $TOOLS; do for grid in ${GRIDS:-default persistent}; do
    flags=; [ $grid = persistent ] && flags=--persistent=true
    save=; [ -f "$ids/doc.bin" ] || save="--save-aux $ids"
    # shellcheck disable=SC2086
    row=$(timeout 120 "$T/$tool" examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 20 \
      --check-shape B=1,H=2,N=2048,D=$D $flags $save --iters 30 --csv 2>&1 | tail -1)
    echo "$tool,$grid,$row" | tee -a "$OUT/docs.csv"
  done; done
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/flex_aux_masks.py --mask document --aux "$ids" \
    --B 1 --N $N --D $D --H 16 2>&1 | grep -E "^flex" | tee -a "$OUT/flex.csv"
done; done
fi

if wants backward; then
echo "== documents backward: flashc without and with --bwd-block-summary, then Flex on the same ids"
echo "summary,name,dtype,B,H,HKV,N,M,D,layout,dir,ms,tflops,rel_dq,rel_dk,rel_dv" > "$OUT/bwd.csv"
echo "peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms" > "$OUT/flex-bwd.csv"
for D in $DS; do for N in $NS; do
  ids="$T/bwd-ids-$D-$N"
  for flag in none --bwd-block-summary; do
    flags=--bwd-block-summary=false; [ $flag != none ] && flags=$flag
    save=; [ -f "$ids/doc.bin" ] || save="--save-aux $ids"
    # shellcheck disable=SC2086
    row=$(timeout 240 "$T/$LAST" examples/document.flash --bwd $flags --shape B=1,H=16,N=$N,D=$D \
      --docs 20 --check-shape B=1,H=2,N=1024,D=$D $save --iters 20 --csv 2>&1 | tail -1)
    echo "$flag,$row" | tee -a "$OUT/bwd.csv"
  done
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/flex_aux_masks.py --mask document --aux "$ids" \
    --B 1 --N $N --D $D --H 16 --bwd 2>&1 | grep -E "^flex" | tee -a "$OUT/flex-bwd.csv"
done; done
fi

if wants tiles; then
echo "== tiles: $LAST's document kernel over tiles and grids, Flex on the same ids"
echo "tile,grid,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/tiles.csv"
[ -f "$OUT/flex.csv" ] || echo "peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms" > "$OUT/flex.csv"
for D in $DS; do for N in $NS; do
  ids="$T/ids-$D-$N"
  if [ "$D" -le 64 ]; then tiles="64x128 64x64 128x128"; else tiles="128x96 128x64 128x128 64x64"; fi
  for tile in $tiles; do for grid in false true; do
    br=${tile%x*}; bc=${tile#*x}
    # The persistent grid applies to warp-specialized tiles (Br >= 128) only.
    [ $grid = true ] && [ "$br" -lt 128 ] && continue
    save=; [ -f "$ids/doc.bin" ] || save="--save-aux $ids"
    # shellcheck disable=SC2086
    row=$(timeout 120 "$T/$LAST" examples/document.flash --shape B=1,H=16,N=$N,D=$D --docs 20 \
      --tile Br=$br,Bc=$bc --persistent=$grid --check-shape B=1,H=2,N=2048,D=$D $save \
      --iters 30 --csv 2>&1 | tail -1)
    echo "$tile,$grid,$row" | tee -a "$OUT/tiles.csv"
  done; done
  if ! awk -F, -v n=$N -v d=$D '$1=="flex" && $5==n && $6==d {f=1} END {exit !f}' "$OUT/flex.csv"; then
    PYTHONUNBUFFERED=1 timeout 150 python3 bench/flex_aux_masks.py --mask document --aux "$ids" \
      --B 1 --N $N --D $D --H 16 2>&1 | grep -E "^flex" | tee -a "$OUT/flex.csv"
  fi
done; done
echo "== table: tiles, Flex / flashc on the same ids (summary included)"
for D in $DS; do for N in $NS; do
  x=$(awk -F, -v n=$N -v d=$D '$1=="flex" && $5==n && $6==d {print $7}' "$OUT/flex.csv")
  awk -F, -v n=$N -v d=$D -v x="$x" '$8==n && $10==d && $12 > 0 {
    printf "D=%s N=%s %-8s persistent=%-5s %s ms (summary %s) flex %s flex/flashc %s\n", d, n, $1, $2, $12, $16, x,
      (x != "" ? sprintf("%.2f", x / $12) : "?")}' "$OUT/tiles.csv"
done; done
fi

if wants padding; then
echo "== key padding (fp16, H = 16, random key lengths): flashc, then Flex on the same lengths"
echo "tool,grid,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/padding.csv"
echo "peer,mask,B,H,N,D,ms,mask_ms,visible_fraction,mask_again_ms" > "$OUT/flex-padding.csv"
for D in $DS; do for shape in "8 4096" "4 8192" "2 16384"; do
  set -- $shape; B=$1; N=$2
  lens="$T/lens-$D-$N"
  for tool in $TOOLS; do
    save=; [ -f "$lens/kv_len.bin" ] || save="--save-aux $lens"
    # shellcheck disable=SC2086
    row=$(timeout 120 "$T/$tool" examples/key_padding.flash --shape B=$B,H=16,N=$N,D=$D \
      --check-shape B=2,H=2,N=2048,D=$D $save --iters 30 --csv 2>&1 | tail -1)
    echo "$tool,default,$row" | tee -a "$OUT/padding.csv"
  done
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/flex_aux_masks.py --mask key_padding --aux "$lens" \
    --B $B --N $N --D $D --H 16 2>&1 | grep -E "^flex" | tee -a "$OUT/flex-padding.csv"
done; done
echo "== table: key padding, Flex / flashc on the same key lengths"
awk -F, 'NR == FNR {if (FNR > 1) flex[$3 "," $5 "," $6] = $7; next}
  FNR > 1 && $12 > 0 {x = flex[$5 "," $8 "," $10];
    printf "D=%s B=%s N=%s %-18s %s ms (summary %s) flex %s flex/flashc %s\n", $10, $5, $8, $1, $12, $16, x,
      (x != "" ? sprintf("%.2f", x / $12) : "?")}' "$OUT/flex-padding.csv" "$OUT/padding.csv"
fi

if wants diagnose; then
echo "== the summary path per block: 20 documents, one document, causal"
echo "tool,case,name,dtype,B,H,HKV,N,M,D,layout,ms,tflops,rel_o,rel_lse,summary_ms,cached_ms" > "$OUT/diagnose.csv"
for N in 16384 32768; do for tool in $TOOLS; do
  for c in "docs20:examples/document.flash --docs 20" "docs1:examples/document.flash --docs 1" \
           "causal:examples/causal.flash --causal"; do
    # shellcheck disable=SC2086
    row=$(timeout 120 "$T/$tool" ${c#*:} --shape B=1,H=16,N=$N,D=128 --check-shape B=1,H=2,N=2048,D=128 \
      --iters 30 --csv 2>&1 | tail -1)
    echo "$tool,${c%%:*},$row" | tee -a "$OUT/diagnose.csv"
  done
done; done
fi

if wants sanitize; then
echo "== compute-sanitizer: $LAST, summary + attention kernels at a small shape"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for c in "document-ws:examples/document.flash --docs 5 --persistent=false --shape B=2,H=2,N=700,D=128" \
           "document-persistent:examples/document.flash --docs 5 --persistent=true --shape B=2,H=2,N=700,D=128" \
           "document-d64:examples/document.flash --docs 5 --shape B=2,H=2,N=700,D=64" \
           "key_padding:examples/key_padding.flash --shape B=3,H=2,N=500,D=64"; do
    log="$T/sanitizer-$tool-${c%%:*}.log"
    # shellcheck disable=SC2086
    timeout 200 "$sanitizer" --tool $tool "$T/$LAST" ${c#*:} --iters 0 > "$log" 2>&1
    echo "$tool ${c%%:*}: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$log" | tail -1) $(grep -c '  ok$' "$log") ok, $(grep -c 'FAIL' "$log") FAIL" | tee -a "$OUT/sanitizer.txt"
  done
done
fi

if wants profile; then
PD=${DS%% *}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for kernel in document document_summary; do
echo "== ncu: $LAST $kernel kernel, D = $PD, N = 16384"
timeout 150 "$NCU" --clock-control none -k regex:"^$kernel\$" --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section SourceCounters --import-source no -o "$T/$kernel" \
  "$T/$LAST" examples/document.flash --shape B=1,H=16,N=16384,D=$PD --docs 20 --iters 3 --warmup 1 \
  --check-shape B=1,H=2,N=2048,D=$PD > "$T/ncu.log" 2>&1
echo "ncu exit $?"; tail -3 "$T/ncu.log"
if [ -f "$T/$kernel.ncu-rep" ]; then
  "$NCU" -i "$T/$kernel.ncu-rep" --page details > "$OUT/ncu-$kernel-details.txt" 2>&1
  "$NCU" -i "$T/$kernel.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-$kernel-sass.csv" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|Warp Cycles|Issued Ipc|Achieved Occupancy|Registers|Waves" \
    "$OUT/ncu-$kernel-details.txt" | head -30
fi
done
fi

if wants compare; then
echo "== table: ms (summary included), summary share, Flex / flashc on the same ids"
cat "$OUT/checks.txt"
for D in $DS; do for N in $NS; do
  x=$(awk -F, -v n=$N -v d=$D '$1=="flex" && $5==n && $6==d {print $7}' "$OUT/flex.csv")
  m=$(awk -F, -v n=$N -v d=$D '$1=="flex" && $5==n && $6==d {print $8 "/" $10}' "$OUT/flex.csv")
  awk -F, -v n=$N -v d=$D -v x="$x" '$8==n && $10==d && $12 > 0 {
    r = (x != "") ? sprintf("%.2f", x / $12) : "?";
    printf "D=%s N=%s %-18s %-10s %s ms (summary %s = %.1f%%) flex %s flex/flashc %s\n", d, n, $1, $2, $12, $16, 100 * $16 / $12, x, r}' "$OUT/docs.csv"
  echo "D=$D N=$N flex create_block_mask ms (first/again): $m"
done; done
fi
