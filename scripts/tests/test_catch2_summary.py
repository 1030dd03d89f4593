"""scripts/gpu/catch2_summary.py: the outcome of a Catch2 run, from the recorded GPU log
(which an earlier parser read as 4 passed, 0 failed), from every summary form of
Catch2 2.13's compact and console reporters, and from real runs of kdtrain_tests."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import catch2_summary  # noqa: E402

RECORDED = ROOT.parent / "shared" / "gpu-runs" / "2026-11-22-e64f2ce" / "cuda_tests.txt"
TESTS = Path(os.environ.get("KDTRAIN_BUILD_DIR", ROOT / "build")) / "kdtrain_tests"


def test_recorded_gpu_log():
    if not RECORDED.exists():
        pytest.skip(f"{RECORDED} not present (../shared is not checked out here)")
    text = RECORDED.read_text()
    r = catch2_summary.parse(text)
    assert r["status"] == "failed"
    assert r["test_cases_failed"] == 4 and r["assertions_failed"] == 66
    assert r["test_cases_passed"] is None  # the compact line does not say; never guessed
    r = catch2_summary.parse(text, listed=20)
    assert (r["test_cases_total"], r["test_cases_passed"]) == (20, 16)
    assert catch2_summary.main([str(RECORDED)]) == 1


@pytest.mark.parametrize("line, status, passed, failed, a_passed, a_failed", [
    ("Passed all 12 test cases with 34 assertions.", "passed", 12, 0, 34, 0),
    ("Passed both 2 test cases with 1 assertion.", "passed", 2, 0, 1, 0),
    ("Passed 1 test case with 5 assertions.", "passed", 1, 0, 5, 0),
    ("Passed all 3 test cases (no assertions).", "passed", 3, 0, 0, 0),
    ("Failed 1 test case, failed 2 assertions.", "failed", None, 1, None, 2),
    ("Failed all 3 test cases, failed all 5 assertions.", "failed", 0, 3, 0, 5),
    ("Failed both 2 test cases, failed 7 assertions.", "failed", 0, 2, 0, 7),
    ("No tests ran.", "no tests", 0, 0, None, None),
    ("All tests passed (34 assertions in 12 test cases)", "passed", 12, 0, 34, 0),
])
def test_summary_forms(line, status, passed, failed, a_passed, a_failed):
    text = "tests/x.cpp:1: failed: something\n" + line + "\n\n"
    r = catch2_summary.parse(text)
    assert (r["status"], r["test_cases_passed"], r["test_cases_failed"]) == (status, passed, failed)
    assert (r["assertions_passed"], r["assertions_failed"]) == (a_passed, a_failed)


def test_console_table():
    text = ("=" * 40 + "\ntest cases: 20 | 16 passed | 4 failed\n"
            "assertions: 90 | 24 passed | 66 failed\n\n")
    r = catch2_summary.parse(text)
    assert (r["status"], r["test_cases_total"], r["test_cases_passed"], r["test_cases_failed"]) == \
        ("failed", 20, 16, 4)
    assert (r["assertions_passed"], r["assertions_failed"]) == (24, 66)


def test_crash_and_skips():
    r = catch2_summary.parse("tests/x.cpp:5: warning: 'SKIPPED: no CUDA device'\nSegmentation fault\n")
    assert r["status"] == "no summary" and r["test_cases_failed"] is None
    assert r["skipped"] == 1
    r = catch2_summary.parse("w: 'SKIPPED: no CUDA device'\nPassed 1 test case with 1 assertion.\n")
    assert r["status"] == "passed" and r["skipped"] == 1


def test_listed_count_disagreeing_is_flagged():
    r = catch2_summary.parse("Passed all 3 test cases with 9 assertions.", listed=5)
    assert "warning" in r


def run_tests(*args):
    if not TESTS.exists():
        pytest.skip(f"{TESTS} not built")
    return subprocess.run([str(TESTS), *args], capture_output=True, text=True, timeout=300)


def test_real_passing_run(tmp_path):
    p = run_tests("[path]", "-r", "compact")
    listed = run_tests("[path]", "--list-test-names-only")
    n = len([line for line in listed.stdout.splitlines() if line.strip()])
    log = tmp_path / "run.txt"
    log.write_text(p.stdout + p.stderr)
    r = catch2_summary.parse(log.read_text(), listed=n)
    assert p.returncode == 0, p.stdout + p.stderr
    assert r["status"] == "passed" and r["test_cases_passed"] == n > 0 and "warning" not in r
    assert catch2_summary.main([str(log), "--json"]) == 0
