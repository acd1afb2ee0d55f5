#!/usr/bin/env bash
# On a GPU host: the differential fuzzer's cases through flash-run, GPU
# against the interpreter on the same IR (no timing). The cases come from
#   flashc-fuzz --emit-cases DIR --count 300 [--seed S]
#     [--emit-backward [--emit-bwd-tile Br=128,Bc=128 ...]] [--emit-head-dims 64,128]
# (a .flash file per case and DIR/cases.txt with its flash-run arguments).
#   FLASH_RUN=path/to/flash-run JOBS=8 scripts/gpu-fuzz.sh DIR
# Prints one line per failing case and a closing "N passed, N failed" line;
# exit 1 when a case failed.
set -uo pipefail
dir=${1:?usage: scripts/gpu-fuzz.sh CASES_DIR}
FLASH_RUN=${FLASH_RUN:-flash-run}
JOBS=${JOBS:-8}
export FLASH_RUN dir
one() {
  local file=${1%% *} args=${1#* }
  # shellcheck disable=SC2086
  out=$(timeout "${CASE_TIMEOUT:-120}" "$FLASH_RUN" "$dir/$file" $args --iters 0 --no-cache 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then echo "ok"
  elif [ $rc -eq 3 ]; then echo "skip"
  else echo "FAIL $file $args (exit $rc)"; echo "$out" | sed 's/^/      /'; fi
}
export -f one
log=$(mktemp)
xargs -d '\n' -P "$JOBS" -I{} bash -c 'one "$1"' _ {} < "$dir/cases.txt" > "$log"
grep -v '^ok$\|^skip$' "$log"
passed=$(grep -c '^ok$' "$log"); skipped=$(grep -c '^skip$' "$log"); failed=$(grep -c '^FAIL' "$log")
echo "gpu-fuzz: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
