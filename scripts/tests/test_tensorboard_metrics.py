"""scripts/report/tensorboard_metrics.py: metrics.jsonl -> TensorBoard event files, read
back with TensorBoard's own EventAccumulator (the reader `tensorboard` serves
from), including a resumed run rewriting its tail and a --follow of a live file."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SCRIPTS, "report"))
import tensorboard_metrics as tbm  # noqa: E402


def record(step, loss, **extra):
    r = {"step": step, "lr": 1e-3 * step, "loss": loss, "kd": loss / 2, "ce": loss * 2,
         "grad_norm": 0.5, "tokens_per_s": 1000.0 + step, "step_time_s": 0.1, "applied": True,
         "skipped_steps": 0, "peak_memory_bytes": 2**30}
    r.update(extra)
    return r


def write_run(run, records, steps=None):
    """Writes metrics.jsonl as kdtrain does when a run resumes: a new file renamed into place."""
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, "metrics.tmp"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(os.path.join(run, "metrics.tmp"), os.path.join(run, "metrics.jsonl"))
    if steps is not None:
        with open(os.path.join(run, "config.json"), "w") as f:
            json.dump({"train": {"steps": steps}}, f)


def scalars(logdir, tag):
    acc = EventAccumulator(logdir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_every_record_becomes_scalars(tmp_path):
    run = tmp_path / "demo"
    recs = [record(s, 3.0 - 0.1 * s) for s in range(1, 6)]
    recs[-1].update(val_loss=2.5, val_kd=1.0, val_ce=4.0, attn_logit_mean_abs=1.5,
                    alpha_ma=[[0.2, 0.4], [0.6, 0.8]], alpha_mean=[0.3, 0.7], sinks=[[1.0, 3.0], [0.0, 2.0]])
    write_run(run, recs)
    assert tbm.main([str(run)]) == 0
    logdir = str(tmp_path / "tensorboard" / "demo")  # beside the run: only `kdtrain train` writes in it
    assert os.listdir(run) == ["metrics.jsonl"]
    loss = scalars(logdir, "train/loss")
    assert [s for s, _ in loss] == [1, 2, 3, 4, 5]
    assert loss[2][1] == pytest.approx(2.7)
    assert scalars(logdir, "val/loss") == [(5, 2.5)]
    assert scalars(logdir, "perf/peak_memory_gib")[0][1] == pytest.approx(1.0)
    assert scalars(logdir, "alpha_ma/layer_01") == [(5, pytest.approx(0.7))]
    assert scalars(logdir, "sinks/layer_00") == [(5, pytest.approx(2.0))]
    assert scalars(logdir, "attention/logit_mean_abs") == [(5, 1.5)]
    # A second invocation replaces its own event file instead of doubling the points.
    assert tbm.main([str(run)]) == 0
    assert len(scalars(logdir, "train/loss")) == 5
    assert len([f for f in os.listdir(logdir) if f.endswith(tbm.SUFFIX)]) == 1


def test_a_row_gets_its_events_beside_its_run(tmp_path):
    # A study row (scripts/report/study_layout.py): ROW/run is the run, ROW/tensorboard its events.
    row = tmp_path / "demo"
    write_run(row / "run", [record(s, 1.0) for s in range(1, 3)])
    for given in (row, row / "run"):
        assert tbm.main([str(given)]) == 0
        assert [s for s, _ in scalars(str(row / "tensorboard"), "train/loss")] == [1, 2]
    assert os.listdir(row / "run") == ["metrics.jsonl"]
    assert tbm.main([str(row), "--logdir", str(tmp_path / "tb")]) == 0
    assert [s for s, _ in scalars(str(tmp_path / "tb" / "demo"), "train/loss")] == [1, 2]


def test_a_resumed_run_supersedes_the_old_tail(tmp_path):
    run = tmp_path / "r"
    write_run(run, [record(s, 10.0 + s) for s in range(1, 9)])
    mirror = tbm.Mirror(str(run), str(tmp_path / "tb"))
    assert mirror.poll() == 8
    # Resumed from the checkpoint at step 5: metrics.jsonl is rewritten from there.
    write_run(run, [record(s, 10.0 + s) for s in range(1, 6)] + [record(s, 100.0 + s) for s in range(6, 10)])
    mirror.poll()
    mirror.close()
    got = dict(scalars(str(tmp_path / "tb"), "train/loss"))
    assert sorted(got) == list(range(1, 10))
    assert got[5] == pytest.approx(15.0) and got[6] == pytest.approx(106.0) and got[9] == pytest.approx(109.0)


def test_follow_reads_a_live_run_until_it_finishes(tmp_path):
    run = tmp_path / "live"
    write_run(run, [record(1, 5.0)], steps=4)
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "report", "tensorboard_metrics.py"), str(run),
                             "--follow", "--interval", "0.2", "--logdir", str(tmp_path / "tb")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def append():
        with open(run / "metrics.jsonl", "a") as f:
            for s in (2, 3, 4):
                time.sleep(0.5)
                f.write(json.dumps(record(s, 5.0 - s)))
                f.flush()
                time.sleep(0.3)  # a line is read only once its newline is there
                f.write("\n")
                f.flush()

    writer = threading.Thread(target=append)
    writer.start()
    writer.join()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "4 steps" in out
    assert [s for s, _ in scalars(str(tmp_path / "tb" / "live"), "train/loss")] == [1, 2, 3, 4]


def test_a_missing_run_directory_is_named(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report", "tensorboard_metrics.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and f"no such file or directory: {tmp_path / 'nope'}" in r.stderr
