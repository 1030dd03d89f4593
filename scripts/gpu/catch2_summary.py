#!/usr/bin/env python3
"""Reads the outcome of a Catch2 v2 test run from its output (the compact or the
console reporter), for scripts/gpu/gpu_check.sh.

  python3 scripts/gpu/catch2_summary.py cuda_tests.txt [--listed N] [--json]

The compact reporter's last line is one of (Catch2 2.13, printTotals):
  Passed all 12 test cases with 34 assertions.     (both / all / nothing for 2 / >2 / 1)
  Passed 1 test case (no assertions).
  Failed 4 test cases, failed 66 assertions.       (some failed: the total is not printed)
  Failed all 3 test cases, failed 5 assertions.
  No tests ran.
and the console reporter's:
  All tests passed (34 assertions in 12 test cases)
  test cases: 20 | 16 passed | 4 failed
  assertions: 90 | 80 passed | 10 failed

A compact "Failed N test cases" line does not say how many passed; --listed N (the
count from `kdtrain_tests "[tag]" --list-test-names-only`) supplies the total.

Run with `-d yes` (the duration of each section, the test case itself included, printed
as "0.123 s: NAME" when it ends), a log also says which test cases ended and which of
them failed or skipped: case_outcomes() reads that, for a run cut short (a suite stopped
by its time limit) and for counting skips per test case.
Without it test_cases_passed is null, never a guess. A log with no summary line
(the test binary crashed or was killed) counts as failed. Test cases that skipped
themselves (a "SKIPPED:" warning, e.g. no CUDA device) pass in Catch2's count;
they are reported separately as `skipped`.

Exit status: 0 when every test case passed, 1 otherwise, 2 on a usage error.
"""
import argparse
import json
import re
import sys

_WORD_COUNT = r"(?:(?:both|all) )?(\d+)"
_COMPACT_PASSED = re.compile(rf"^Passed {_WORD_COUNT} test cases? with (\d+) assertions?\.$")
_COMPACT_PASSED_EMPTY = re.compile(rf"^Passed {_WORD_COUNT} test cases? \(no assertions\)\.$")
_COMPACT_FAILED = re.compile(rf"^Failed ((?:both|all) )?(\d+) test cases?, failed {_WORD_COUNT} assertions?\.$")
_CONSOLE_PASSED = re.compile(r"^All tests passed \((\d+) assertions? in (\d+) test cases?\)$")
_CONSOLE_ROW = re.compile(r"^(test cases|assertions): +(\d+|- none -)(.*)$")
_CONSOLE_COLUMN = re.compile(r"\| +(\d+) (passed|failed as expected|failed)")


def _console_row(rest):
    cols = {name: int(n) for n, name in _CONSOLE_COLUMN.findall(rest)}
    return cols.get("passed", 0), cols.get("failed", 0)


def parse(text, listed=None):
    """The run's outcome as a dict (keys in the module docstring's terms)."""
    r = {"status": "no summary", "summary": None, "test_cases_total": None,
         "test_cases_passed": None, "test_cases_failed": None,
         "assertions_passed": None, "assertions_failed": None,
         "skipped": sum(1 for line in text.splitlines() if "SKIPPED:" in line)}
    lines = [line.strip() for line in text.splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        m = _COMPACT_PASSED.match(line) or _CONSOLE_PASSED.match(line)
        if m:
            cases, asserts = (int(m.group(1)), int(m.group(2))) if line.startswith("Passed") \
                else (int(m.group(2)), int(m.group(1)))
            r.update(status="passed", summary=line, test_cases_total=cases, test_cases_passed=cases,
                     test_cases_failed=0, assertions_passed=asserts, assertions_failed=0)
            break
        m = _COMPACT_PASSED_EMPTY.match(line)
        if m:
            cases = int(m.group(1))
            r.update(status="passed", summary=line, test_cases_total=cases, test_cases_passed=cases,
                     test_cases_failed=0, assertions_passed=0, assertions_failed=0)
            break
        m = _COMPACT_FAILED.match(line)
        if m:
            every, failed = m.group(1), int(m.group(2))
            r.update(status="failed", summary=line, test_cases_failed=failed,
                     assertions_failed=int(m.group(3)))
            if every:  # "Failed all/both N": nothing passed
                r.update(test_cases_total=failed, test_cases_passed=0, assertions_passed=0)
            break
        if line.startswith("No tests ran"):
            r.update(status="no tests", summary=line, test_cases_total=0, test_cases_passed=0,
                     test_cases_failed=0)
            break
        m = _CONSOLE_ROW.match(line)
        if m and m.group(1) == "assertions" and i > 0 and _CONSOLE_ROW.match(lines[i - 1]):
            tc = _CONSOLE_ROW.match(lines[i - 1])
            total = 0 if tc.group(2) == "- none -" else int(tc.group(2))
            passed, failed = _console_row(tc.group(3))
            a_passed, a_failed = _console_row(m.group(3))
            r.update(status="failed" if failed or total == 0 else "passed",
                     summary=lines[i - 1] + " / " + line, test_cases_total=total,
                     test_cases_passed=passed, test_cases_failed=failed,
                     assertions_passed=a_passed, assertions_failed=a_failed)
            if total == 0:
                r["status"] = "no tests"
            break
    if listed is not None:
        if r["test_cases_total"] is None and r["test_cases_failed"] is not None:
            r["test_cases_total"] = listed
            r["test_cases_passed"] = listed - r["test_cases_failed"]
        r["test_cases_listed"] = listed
        if r["test_cases_total"] is not None and r["test_cases_total"] != listed:
            r["warning"] = f"{listed} test cases listed, {r['test_cases_total']} in the summary"
    return r


_DURATION = re.compile(r"^\d+\.\d+ s: (.+)$")
_SKIP = "SKIPPED:"


def _is_cut(line):
    """The failure Catch2 reports for the SIGTERM that cut a run (`timeout`), not a
    test's verdict (a crash, SIGSEGV or SIGABRT, stays a failure)."""
    return "fatal error condition" in line and "SIGTERM" in line


def case_outcomes(text, names):
    """The test cases of a `-d yes` log whose end line was seen, in order, each as
    {"name", "failed", "skipped"}; and whether failures were printed after the last one
    (a test case that failed and did not end). `names`: the selected test cases
    (--list-test-names-only); section end lines (other names) are passed over, and a
    test case with sections ends once per section, so a name seen once may still have
    had sections left when a run was cut. The SIGTERM that cut a run is no failure."""
    names = set(names)
    seen, order = {}, []
    failed = skipped = False
    for raw in text.splitlines():
        line = raw.strip()
        m = _DURATION.match(line)
        if m and m.group(1) in names:
            name = m.group(1)
            if name not in seen:
                seen[name] = {"name": name, "failed": False, "skipped": False}
                order.append(name)
            seen[name]["failed"] |= failed
            seen[name]["skipped"] |= skipped
            failed = skipped = False
        elif ": failed:" in line and not _is_cut(line):
            failed = True
        elif _SKIP in line:
            skipped = True
    return [seen[n] for n in order], failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the test binary's output")
    ap.add_argument("--listed", type=int, default=None,
                    help="number of test cases the run selected (--list-test-names-only)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        with open(args.log, errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"catch2_summary: cannot read {args.log}: {e.strerror}", file=sys.stderr)
        return 2
    r = parse(text, args.listed)
    if args.json:
        print(json.dumps(r))
    else:
        fmt = lambda x: "?" if x is None else str(x)  # noqa: E731
        print(f"{r['status']}: {fmt(r['test_cases_passed'])} passed, {fmt(r['test_cases_failed'])} "
              f"failed, {r['skipped']} skipped ({r['summary'] or 'no summary line'})")
    return 0 if r["status"] == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
