#!/usr/bin/env bash
# Every test: set up and build, then the lit tests (front end, dialect,
# passes, lowering down to PTX, ptxas where the CUDA toolkit is installed)
# and the unit tests through ctest (interpreter vs fp64 reference, runtime;
# GPU tests report themselves skipped where there is no GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh || exit 1

lit_log=$(mktemp)
/usr/lib/llvm-22/bin/lit -sv "$BUILD_DIR/test" 2>&1 | tee "$lit_log"
lit_status=${PIPESTATUS[0]}
lit_passed=$(grep -oP '^\s*Passed\s*:\s*\K[0-9]+' "$lit_log" || echo 0)
lit_failed=$(grep -oP '^\s*Failed\s*:\s*\K[0-9]+' "$lit_log" || echo 0)
lit_unsupported=$(grep -oP '^\s*Unsupported\s*:\s*\K[0-9]+' "$lit_log" || echo 0)

ctest_log=$(mktemp)
(cd "$BUILD_DIR" && ctest --output-on-failure -j2) 2>&1 | tee "$ctest_log"
ctest_status=${PIPESTATUS[0]}
ctest_total=$(grep -oP 'tests failed out of \K[0-9]+' "$ctest_log" || echo 0)
ctest_failed=$(grep -oP '[0-9]+(?= tests failed out of)' "$ctest_log" || echo 0)
ctest_skipped=$(grep -c '(Skipped)' "$ctest_log" || true)
ctest_passed=$(( ${ctest_total:-0} - ${ctest_failed:-0} - ${ctest_skipped:-0} ))

# The front end's libFuzzer target (ASan + UBSan), for a bounded time, where
# clang 22 is installed (scripts/setup.sh installs it).
fuzz_log=$(mktemp)
fuzz_status=0
if command -v clang++-22 >/dev/null; then
  scripts/frontend-fuzz.sh "${FRONTEND_FUZZ_SECONDS:-60}" 2>&1 | tee "$fuzz_log"
  fuzz_status=${PIPESTATUS[0]}
  fuzz_passed=$([ "$fuzz_status" -eq 0 ] && echo 1 || echo 0)
  fuzz_result="$fuzz_passed passed, $(( 1 - fuzz_passed )) failed"
else
  fuzz_passed=0
  fuzz_result="0 passed, 0 failed (skipped: no clang++-22)"
fi

echo
echo "libFuzzer (front end, ${FRONTEND_FUZZ_SECONDS:-60} s): $fuzz_result"
echo "lit: ${lit_passed:-0} passed, ${lit_failed:-0} failed, ${lit_unsupported:-0} skipped"
echo "ctest: ${ctest_passed} passed, ${ctest_failed:-0} failed, ${ctest_skipped} skipped"
echo "total: $(( ${lit_passed:-0} + ctest_passed + fuzz_passed )) passed, $(( ${lit_failed:-0} + ${ctest_failed:-0} + (fuzz_status != 0) )) failed, $(( ${lit_unsupported:-0} + ctest_skipped )) skipped"
if [ "$lit_status" -ne 0 ] || [ "$ctest_status" -ne 0 ] || [ "$fuzz_status" -ne 0 ]; then
  echo "tests FAILED (lit exit $lit_status, ctest exit $ctest_status, libFuzzer exit $fuzz_status)"
  exit 1
fi
