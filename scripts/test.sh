#!/usr/bin/env bash
# Runs the whole test suite: the C++ tests (ctest) and the Python tests (pytest).
# Builds first when there is no build yet (via scripts/setup.sh), otherwise brings
# the existing build up to date. Both runners always run; the exit status is
# non-zero when either failed.
#
#   scripts/test.sh [--no-build] [extra pytest arguments...]
#
# Environment: KDTRAIN_TEST_JOBS (parallel ctest jobs, default nproc),
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
set -e
# Exit 5 means "no tests collected": not a failure of the code under test.
if ((pytest_rc == 5)); then pytest_rc=0; fi

echo "=== summary ==="
ctest_summary="$(grep -E "tests passed|No tests were found" "$LOG_DIR/ctest.log" | tail -1 || true)"
pytest_summary="$(grep -E "(passed|failed|skipped|error|no tests ran)" "$LOG_DIR/pytest.log" | tail -1 || true)"
skipped_cuda="$(grep -c "SKIPPED: no CUDA device" "$LOG_DIR/ctest.log" || true)"
echo "ctest:  rc=$ctest_rc  ${ctest_summary:-(no summary)}"
if ((skipped_cuda > 0)); then echo "        CUDA test cases skipped (no device): $skipped_cuda"; fi
echo "pytest: rc=$pytest_rc  ${pytest_summary:-(no summary)}"
if ((ctest_rc != 0 || pytest_rc != 0)); then
  echo "FAILED"
  exit 1
fi
echo "OK"
