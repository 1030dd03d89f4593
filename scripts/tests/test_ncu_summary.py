"""The GPU window's Nsight Compute step without a GPU: scripts/gpu/ncu_summary.py on CSVs laid
out as `ncu --import R --csv --page details` and `--page raw` write them (quoted fields, a
units row in the raw page), and the step profile_b of scripts/gpu/gpu_window_steps.sh with a
fake ncu: it profiles every pair of PROFILES, exports both pages and summarizes them; an ncu
that cannot read the counters, or no ncu, ends the step at once without failing it."""
import json
import os
import subprocess
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import ncu_summary  # noqa: E402
import window_report  # noqa: E402

MAIN = "void kdtrain::cuda::(anonymous namespace)::bwd_main_kernel<64, false, false>(kdtrain::flash::BwdArgs)"
PREP = "void kdtrain::cuda::(anonymous namespace)::bwd_prep_kernel<64, false, false>(kdtrain::flash::BwdArgs)"
HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def details_csv(rows):
    lines = [HEAD]
    for i, kernel, section, metric, unit, value in rows:
        lines.append(f'"{i}","4242","kdtrain","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0",'
                     f'"{section}","{metric}","{unit}","{value}"')
    return "\n".join(lines) + "\n"


DETAILS = details_csv([
    (0, PREP, "GPU Speed Of Light Throughput", "Duration", "us", "41.50"),
    (0, PREP, "GPU Speed Of Light Throughput", "Memory Throughput", "%", "71.20"),
    (0, PREP, "GPU Speed Of Light Throughput", "Elapsed Cycles", "cycle", "72,800"),  # not a headline
    (1, MAIN, "GPU Speed Of Light Throughput", "Duration", "ms", "1.31"),
    (1, MAIN, "GPU Speed Of Light Throughput", "Compute (SM) Throughput", "%", "48.07"),
    (1, MAIN, "Launch Statistics", "Registers Per Thread", "register/thread", "232"),
    (1, MAIN, "Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycle", "11.62"),
])
STALLS = ("barrier", "long_scoreboard", "math_pipe_throttle", "short_scoreboard")
RAW = ('"ID","Kernel Name",' + ",".join(f'"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"'
                                       for s in STALLS) + "\n"
       + '"","",' + ",".join('"ratio"' for _ in STALLS) + "\n"
       + f'"0","{PREP}","0.10","6.40","0.02","0.50"\n'
       + f'"1","{MAIN}","3.25","0.75","1.90","2.20"\n')


def test_summary_reads_the_headline_metrics_and_the_largest_stalls(tmp_path):
    (tmp_path / "profile_d64_baseline.csv").write_text(DETAILS)
    (tmp_path / "profile_d64_baseline.raw.csv").write_text(RAW)
    s = ncu_summary.summarize(str(tmp_path))
    assert [(k["id"], ncu_summary.short_kernel(k["kernel"])) for k in s] == [
        ("0", "bwd_prep_kernel<64, false, false>"), ("1", "bwd_main_kernel<64, false, false>")]
    assert s[0]["metrics"] == {"Duration": "41.50 us", "Memory Throughput": "71.20 %"}
    assert s[1]["stalls"] == [("barrier", 3.25), ("short_scoreboard", 2.2), ("math_pipe_throttle", 1.9)]
    assert ncu_summary.line(s[1]) == (
        "d64_baseline #1 bwd_main_kernel<64, false, false>: Duration 1.31 ms, Compute (SM) Throughput 48.07 %, "
        "Registers Per Thread 232 register/thread, Warp Cycles Per Issued Instruction 11.62 cycle; "
        "stalls (cycles/issue): barrier 3.2, short_scoreboard 2.2, math_pipe_throttle 1.9")
    table = window_report.window_table(dict(window_report.window_summary(str(tmp_path), "0123456", "X"),
                                            attention_profile=s))
    assert "profile d64_baseline #1 bwd_main_kernel<64, false, false>" in table


@pytest.mark.parametrize("text", ["", "ncu: error: no such report\n", '"ID","Kernel Name"\n"0"\n'])
def test_summary_of_an_unreadable_profile_is_empty(tmp_path, text):
    (tmp_path / "profile_d64_baseline.csv").write_text(text)
    (tmp_path / "profile_d64_baseline.raw.csv").write_text(text)
    assert ncu_summary.summarize(str(tmp_path)) == []
    assert ncu_summary.main(["ncu_summary.py", str(tmp_path)]) == 0


FAKE_NCU = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
out=""; page=""; app=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out="$2"; shift ;; --page) page="$2"; shift ;; bench) app=1 ;; esac
  shift
done
if [ -n "$FAKE_FAIL" ]; then echo "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"; exit 1; fi
if [ -n "$out" ]; then [ -n "$app" ] && echo fake > "$out.ncu-rep"; exit 0; fi
if [ "$page" = details ]; then cat "$FAKE_DETAILS"; else cat "$FAKE_RAW"; fi
"""


def run_profile_step(tmp_path, **env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ncu").write_text(FAKE_NCU)
    (bin_dir / "ncu").chmod(0o755)
    (tmp_path / "details.csv").write_text(DETAILS)
    (tmp_path / "raw.csv").write_text(RAW)
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    script = ('source scripts/gpu/gpu_prelude.sh; source scripts/gpu/gpu_window_steps.sh; '
              'STEP_DEADLINE=$(( $(date +%s) + 60 )); profile_b')
    full = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RAW=str(raw), KDTRAIN="/bin/true",
                FAKE_LOG=str(tmp_path / "ncu.log"), FAKE_DETAILS=str(tmp_path / "details.csv"),
                FAKE_RAW=str(tmp_path / "raw.csv"), **env)
    p = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, env=full)
    return p, raw


def test_profile_step_profiles_each_pair_and_summarizes(tmp_path):
    p, raw = run_profile_step(tmp_path, PROFILES="64 baseline\n128 affine")
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("d64_baseline", "d128_affine"):
        for ext in (".ncu-rep", ".csv", ".raw.csv"):
            assert (raw / f"profile_{name}{ext}").exists(), name + ext
    summary = json.loads((raw / "profile_summary.json").read_text())
    assert [k["profile"] for k in summary] == ["d128_affine"] * 2 + ["d64_baseline"] * 2
    calls = (tmp_path / "ncu.log").read_text()
    assert "--clock-control none" in calls and "--head-dim 128 --steps 1 --warmup 0" in calls
    assert "--attention affine" in calls and "bwd_main_kernel" in p.stdout


def test_profile_step_stops_where_ncu_cannot_read_counters(tmp_path):
    p, raw = run_profile_step(tmp_path, FAKE_FAIL="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ncu cannot read the counters here" in p.stdout
    assert (tmp_path / "ncu.log").read_text().count("bench") == 1  # the first pair only
