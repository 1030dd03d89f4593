"""scripts/gpu/catch2_summary.py: the outcome of a Catch2 run, from the recorded GPU log
(which an earlier parser read as 4 passed, 0 failed), from every summary form of
Catch2 2.13's compact and console reporters, and from real runs of kdtrain_tests."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
import catch2_summary  # noqa: E402
import gpu_report  # noqa: E402

RECORDED = ROOT.parent / "shared" / "gpu-runs" / "2026-11-22-e64f2ce" / "cuda_tests.txt"
from repo_paths import KDTRAIN_TESTS as TESTS  # noqa: E402


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


DURATIONS_LOG = """\
x.cpp:9: warning: 'SKIPPED: no CUDA device'
0.001 s: skips
x.cpp:20: failed: a == b for: 1 == 2
0.010 s: a section
0.020 s: fails
0.030 s: passes
x.cpp:40: failed: fatal error condition with message: 'SIGTERM - Termination request signal'
Failed 1 test case, failed 2 assertions.
"""


def test_case_outcomes_of_a_cut_run():
    cases, failing = catch2_summary.case_outcomes(DURATIONS_LOG, ["skips", "fails", "passes", "never"])
    assert [(c["name"], c["failed"], c["skipped"]) for c in cases] == [
        ("skips", False, True), ("fails", True, False), ("passes", False, False)]
    assert failing is False  # the SIGTERM of the cut is no failure
    crash = DURATIONS_LOG.replace("SIGTERM - Termination request", "SIGSEGV - Segmentation violation")
    assert catch2_summary.case_outcomes(crash, ["passes"])[1] is True  # a crash is


def write_suite(tmp_path, log, names, meta):
    (tmp_path / "tests_s.txt").write_text(log)
    (tmp_path / "tests_s.names").write_text("\n".join(names) + "\n")
    (tmp_path / "tests_s.meta.json").write_text(json.dumps(meta))


def test_cut_suite_counts_from_the_window_timer(tmp_path):
    names = ["skips", "fails", "passes", "never"]
    write_suite(tmp_path, DURATIONS_LOG, names, {"filter": "[x]", "listed": 4, "limit": 30, "exit_code": 124,
                                                  "cut": True, "seconds": 30})
    t = gpu_report.suite_summary(str(tmp_path), "s")
    # "passes" was the last case seen: it may have had sections left, so it counts as cut.
    assert (t["status"], t["cut_at"], t["test_cases_passed"], t["test_cases_failed"], t["skipped"],
            t["test_cases_cut"]) == ("cut", 30, 0, 1, 1, 2)
    assert gpu_report.suite_row("s", t)[1] == "cut at 30 s: 0 passed, 1 failed, 1 skipped, 2 cut"
    # Without the timer's word, the same log is Catch2's own verdict: a failure.
    write_suite(tmp_path, DURATIONS_LOG, names, {"filter": "[x]", "listed": 4, "exit_code": 1, "seconds": 3})
    assert gpu_report.suite_summary(str(tmp_path), "s")["status"] == "failed"
    # A run that never returned (the step around it was cut) is cut too.
    write_suite(tmp_path, DURATIONS_LOG, names, {"filter": "[x]", "listed": 4, "limit": 30})
    assert gpu_report.suite_summary(str(tmp_path), "s")["status"] == "cut"


def catch2_traps_sigterm(pid):
    """Whether the process has a SIGTERM handler: Catch2 2.13 installs its handler only while
    a test case runs (catch.hpp's FatalConditionHandler), so this says a case is running."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def test_real_run_cut_by_timeout(tmp_path):
    """kdtrain_tests cut by a timer's SIGTERM inside a test case: Catch2 traps it and says
    "Failed 1 test case"; read with the timer's verdict it is a cut with no failure. The
    signal is sent once a case runs (a fixed `timeout 3` could land before the first case on
    a loaded CI machine, where Catch2 prints no summary at all)."""
    if not TESTS.exists():
        pytest.skip(f"{TESTS} not built")
    names = run_tests("[flash][sim]", "--list-test-names-only").stdout.split("\n")
    names = [n for n in names if n.strip()]
    # The first [flash][sim] case takes seconds: the signal lands inside it.
    p = subprocess.Popen([str(TESTS), "[flash][sim]", "-r", "compact", "-d", "yes"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not catch2_traps_sigterm(p.pid):
            assert p.poll() is None and time.monotonic() < deadline, "no test case started"
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        log, _ = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == -signal.SIGTERM  # Catch2 re-raises the signal once it has reported
    assert catch2_summary.parse(log)["status"] == "failed"  # what the window used to report
    write_suite(tmp_path, log, names, {"filter": "[flash][sim]", "listed": len(names), "limit": 3,
                                       "exit_code": 124, "cut": True, "seconds": 3})
    t = gpu_report.suite_summary(str(tmp_path), "s")
    assert (t["status"], t["test_cases_failed"]) == ("cut", 0)
    assert t["test_cases_passed"] + t["test_cases_cut"] == len(names)
