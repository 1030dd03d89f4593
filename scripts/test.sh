#!/usr/bin/env bash
# Runs the whole test suite: the C++ tests (ctest), the Python tests (pytest) and
# every fuzz target for a fixed budget (scripts/fuzz.sh, 15 s each, under 2 minutes).
# Builds first when there is no build yet (via scripts/setup.sh), otherwise brings
# the existing build up to date. All three always run; the exit status is
# non-zero when any failed.
#
#   scripts/test.sh [--no-build] [extra pytest arguments...]
#
# Environment: KDTRAIN_TEST_JOBS (parallel ctest jobs, default nproc),
#              KDTRAIN_FUZZ_SECONDS (per fuzz target, default 15; 0 skips fuzzing),
#              KDTRAIN_BUILD_DIR (default build), KDTRAIN_BUILD_JOBS (default nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${KDTRAIN_BUILD_DIR:-build}"
export KDTRAIN_BUILD_DIR="$BUILD_DIR"  # the Python tests look for the binary there
TEST_JOBS="${KDTRAIN_TEST_JOBS:-$(nproc)}"
DO_BUILD=1
if [[ "${1:-}" == "--no-build" ]]; then
  DO_BUILD=0
  shift
fi

if ((DO_BUILD)); then
  if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    cmake --build "$BUILD_DIR" -j"${KDTRAIN_BUILD_JOBS:-$(nproc)}"
  else
    scripts/setup.sh --no-python
  fi
fi

LOG_DIR="$(mktemp -d)"
trap 'rm -rf "$LOG_DIR"' EXIT

echo "=== ctest ($BUILD_DIR, $TEST_JOBS jobs) ==="
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$TEST_JOBS" 2>&1 | tee "$LOG_DIR/ctest.log"
ctest_rc=${PIPESTATUS[0]}

echo "=== pytest (scripts/tests) ==="
python3 -m pytest -q -rs scripts/tests "$@" 2>&1 | tee "$LOG_DIR/pytest.log"
pytest_rc=${PIPESTATUS[0]}

FUZZ_SECONDS="${KDTRAIN_FUZZ_SECONDS:-15}"
fuzz_rc=0
if ((FUZZ_SECONDS > 0)); then
  echo "=== fuzz (scripts/fuzz.sh, ${FUZZ_SECONDS}s per target) ==="
  scripts/fuzz.sh --seconds "$FUZZ_SECONDS" 2>&1 | tee "$LOG_DIR/fuzz.log"
  fuzz_rc=${PIPESTATUS[0]}
fi
set -e
# Exit 5 means "no tests collected": not a failure of the code under test.
if ((pytest_rc == 5)); then pytest_rc=0; fi

echo "=== summary ==="
ctest_summary="$(grep -E "tests passed|No tests were found" "$LOG_DIR/ctest.log" | tail -1 || true)"
pytest_summary="$(grep -E "(passed|failed|skipped|deselected|error|no tests ran)" "$LOG_DIR/pytest.log" | tail -1 || true)"
# ctest hides the output of passing tests; its LastTest.log keeps every test's output,
# which is where the CUDA tests' skip message is.
skipped_cuda="$(grep -c "SKIPPED: no CUDA device" "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null || true)"
echo "ctest:  rc=$ctest_rc  ${ctest_summary:-(no summary)}"
if ((${skipped_cuda:-0} > 0)); then echo "        CUDA test cases skipped (no device): $skipped_cuda"; fi
echo "pytest: rc=$pytest_rc  ${pytest_summary:-(no summary)}"
fuzz_summary="$(grep -E "^fuzz: (all|FAILED|SKIPPED)" "$LOG_DIR/fuzz.log" 2>/dev/null | tail -1 || true)"
echo "fuzz:   rc=$fuzz_rc  ${fuzz_summary:-(not run: KDTRAIN_FUZZ_SECONDS=0)}"
if ((ctest_rc != 0 || pytest_rc != 0 || fuzz_rc != 0)); then
  echo "FAILED"
  exit 1
fi
echo "OK"
