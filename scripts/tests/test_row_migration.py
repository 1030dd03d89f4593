"""Rows made before the run/ layout (scripts/report/study_layout.py, `migrate`): a flat
row -- a small-study or reproduce.sh folder holding the run's own files and its results
side by side -- moves into ROW/run with its results beside it, and loses nothing.

The rows are real: a tiny run trained by build/kdtrain, its C4-style evaluation written by
`kdtrain eval` and moved where the scripts used to write it. Each test compares the tree
(every path and the bytes of every file) before and after.
"""
import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import KDTRAIN, REPO, have  # noqa: E402

pytestmark = pytest.mark.skipif(not KDTRAIN.exists(), reason=f"{KDTRAIN} not built")
LAYOUT = REPO / "scripts" / "report" / "study_layout.py"
OWN = {"kdtrain.lock", "config.json", "metrics.jsonl", "checkpoints"}


def write_shard(path: Path, n: int = 6000, seed: int = 3) -> str:
    """llm.c uint16 shard of pseudo-text bytes (ids < 128, any byte-level vocabulary)."""
    x, tokens = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        tokens.append(32 if (x >> 33) % 4 == 0 else 97 + (x >> 40) % 26)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<256i", 20240520, 1, n, *[0] * 253) + struct.pack(f"<{n}H", *tokens))
    return str(path)


def tiny_train(shard: str, run_dir: Path, *extra: str) -> None:
    subprocess.run([str(KDTRAIN), "train", "--preset", "tiny-llama", "--set", f"data.train={shard}",
                    "--set", "train.seq_len=32", "--set", "train.global_batch=2", "--set", "train.micro_batch=2",
                    "--set", "train.steps=2", "--set", "schedule.warmup=1", "--set", "train.threads=1",
                    "--set", "eval.interval=0", "--set", "checkpoint.interval=0", *extra,
                    "--run-dir", str(run_dir)], check=True, capture_output=True)


def tree(root: Path) -> dict:
    """path -> sha256 of a file's bytes, or 'dir' / 'link:TARGET'."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def migrated(before: dict) -> dict:
    """The tree a migration makes of a flat row's tree: the run's own entries under run/."""
    after = {"run": "dir"}
    for rel, h in before.items():
        after[("run/" + rel) if rel.split("/")[0] in OWN else rel] = h
    return after


def migrate(*rows: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAYOUT), "migrate", *map(str, rows)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def flat_template(tmp_path_factory) -> Path:
    """A flat row as the scripts made it before the run/ layout: the run, with its
    eval_c4.json, analysis/, hf/, info.json and study_stamp among its own files."""
    base = tmp_path_factory.mktemp("flat")
    shard = write_shard(base / "data" / "train_0.bin")
    row = base / "row"
    tiny_train(shard, row)
    subprocess.run([str(KDTRAIN), "eval", "--checkpoint", str(row), "--data", shard, "--seq-len", "32",
                    "--max-windows", "2", "--out", str(base / "eval_c4.json")], check=True, capture_output=True)
    shutil.move(str(base / "eval_c4.json"), str(row / "eval_c4.json"))
    (row / "analysis").mkdir()
    (row / "analysis" / "analysis.json").write_text('{"made": "before the run/ layout"}\n')
    (row / "hf").mkdir()
    (row / "hf" / "config.json").write_text('{"model_type": "llama"}\n')
    (row / "info.json").write_text('{"delta_params": 0}\n')
    (row / "study_stamp").write_text("0123abcd\n")
    return row


@pytest.fixture
def flat_row(flat_template, tmp_path) -> Path:
    row = tmp_path / "runs" / "affine"
    shutil.copytree(flat_template, row, symlinks=True)
    return row


def shard_of(row: Path) -> str:
    return json.loads((row / "config.json").read_text())["data"]["train"][0]


def test_the_current_kdtrain_refuses_a_result_inside_a_flat_row(flat_row):
    """Why a flat row must move: nothing derived may be written inside a run any more."""
    r = subprocess.run([str(KDTRAIN), "info", "--config", str(flat_row / "config.json"), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0
    r = subprocess.run([str(KDTRAIN), "eval", "--checkpoint", str(flat_row), "--data", shard_of(flat_row), "--seq-len", "32",
                        "--max-windows", "1", "--out", str(flat_row / "eval_again.json")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and not (flat_row / "eval_again.json").exists()
    assert "a training run directory" in r.stderr and "The place rule" in r.stderr


def test_a_flat_row_moves_into_run_and_loses_nothing(flat_row):
    before = tree(flat_row)
    assert OWN <= set(before) and "eval_c4.json" in before
    r = migrate(flat_row)
    assert r.returncode == 0, r.stderr
    assert f"{flat_row}: moved checkpoints, config.json, kdtrain.lock, metrics.jsonl into {flat_row}/run" in r.stderr
    assert tree(flat_row) == migrated(before)  # every byte kept, nothing added but run/
    v = subprocess.run([str(KDTRAIN), "verify", str(flat_row / "run")], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    # a result of the migrated run may now be written beside it
    shard = shard_of(flat_row / "run")
    e = subprocess.run([str(KDTRAIN), "eval", "--checkpoint", str(flat_row / "run"), "--data", shard,
                        "--seq-len", "32", "--max-windows", "1", "--out", str(flat_row / "eval_again.json")],
                       capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    # a second migration, and one of a row laid out already, change nothing
    laid_out = tree(flat_row)
    again = migrate(flat_row, flat_row.parent / "missing")
    assert again.returncode == 0 and again.stderr == "" and tree(flat_row) == laid_out


def test_a_stray_entry_is_refused_by_name_and_nothing_moves(flat_row, tmp_path):
    (flat_row / "notes.txt").write_text("mine\n")
    other = tmp_path / "runs" / "sink"  # a healthy flat row named in the same call stays flat too
    shutil.copytree(flat_row, other, symlinks=True)
    (other / "notes.txt").unlink()
    before, other_before = tree(flat_row), tree(other)
    r = migrate(other, flat_row)
    assert r.returncode == 1
    assert f"{flat_row} is a row in the old flat layout, and notes.txt is neither" in r.stderr
    assert f"mkdir -p {flat_row}/run && mv {flat_row}/kdtrain.lock {flat_row}/config.json" in r.stderr
    assert "nothing was moved" in r.stderr
    assert tree(flat_row) == before and tree(other) == other_before


def test_a_row_with_both_layouts_is_refused(flat_row):
    (flat_row / "run").mkdir()
    (flat_row / "run" / "metrics.jsonl").write_text("")
    before = tree(flat_row)
    r = migrate(flat_row)
    assert r.returncode == 1 and f"{flat_row} holds both run/ and a run's own files" in r.stderr
    assert tree(flat_row) == before


def test_a_run_in_use_is_refused(flat_row):
    before = tree(flat_row)
    with open(flat_row / "kdtrain.lock", "rb") as lock:  # as a running `kdtrain train` holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = migrate(flat_row)
    assert r.returncode == 1 and "holds a run in use" in r.stderr
    assert tree(flat_row) == before


def test_the_empty_run_folder_a_refused_rerun_left_is_used(flat_row):
    before = tree(flat_row)
    (flat_row / "run").mkdir()  # scripts/reproduce.sh's `mkdir -p ROW/run` before kdtrain refused
    r = migrate(flat_row)
    assert r.returncode == 0, r.stderr
    assert tree(flat_row) == migrated(before)


def test_an_interrupted_migration_is_finished(flat_row):
    before = tree(flat_row)
    staged = flat_row / ".run.migrating"  # killed after moving two of the four entries
    staged.mkdir()
    os.rename(flat_row / "checkpoints", staged / "checkpoints")
    os.rename(flat_row / "config.json", staged / "config.json")
    r = migrate(flat_row)
    assert r.returncode == 0, r.stderr
    assert tree(flat_row) == migrated(before)


def test_the_staging_folder_never_holds_a_second_copy(flat_row):
    staged = flat_row / ".run.migrating"
    staged.mkdir()
    shutil.copy(flat_row / "config.json", staged / "config.json")
    before = tree(flat_row)
    r = migrate(flat_row)
    assert r.returncode == 1 and "config.json" in r.stderr and "holds too" in r.stderr
    assert tree(flat_row) == before


@pytest.mark.skipif(not have("tokenizers"), reason="tokenizers not installed")
def test_reproduce_sh_migrates_a_flat_row_and_retrains_nothing(tmp_path):
    """A reproduce.sh row made before the run/ layout (--out ROW was the run itself,
    its results inside): the rerun moves the run into ROW/run and finds every stage
    done, its reproduce_stamp honoured, without touching a byte."""
    data = tmp_path / "data"
    for name in ("fineweb_edu/train_0.bin", "fineweb_edu/val_0.bin", "c4/c4_val_0.bin"):
        write_shard(data / name, seed=len(name))
    for sub in ("fineweb_edu", "c4"):  # the prepare stages are done
        (data / sub / "manifest.json").write_text('{"vocab_size": 256}\n')
    config = json.loads((REPO / "configs" / "tiny-llama.json").read_text())
    config["data"] = {"train": "x/train_*.bin", "val": "x/val_*.bin"}
    config["train"].update(seq_len=32, global_batch=2, micro_batch=2, threads=1)
    config_path = tmp_path / "tiny.json"
    config_path.write_text(json.dumps(config))
    teacher = tmp_path / "teacher"
    tiny_train(str(data / "fineweb_edu" / "train_0.bin"), teacher, "--attention", "baseline")
    tokenizer = tmp_path / "tok"
    subprocess.run([sys.executable, str(REPO / "scripts" / "data" / "make_byte_tokenizer.py"), "--out",
                    str(tokenizer)], check=True, capture_output=True)
    row = tmp_path / "row"
    cmd = ["bash", str(REPO / "scripts" / "reproduce.sh"), "--config", str(config_path), "--attention", "affine",
           "--data-dir", str(data), "--teacher", str(teacher / "checkpoints" / "step_00000002"),
           "--tokenizer", str(tokenizer), "--out", str(row), "--steps", "2", "--device", "cpu",
           "--no-zero-shot", "--no-report", "--eval-windows", "2", "--analyze-seqs", "1", "--kdtrain", str(KDTRAIN)]
    made = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    # the layout before run/: the run's own files and its results side by side in ROW
    for p in (row / "run").iterdir():
        os.rename(p, row / p.name)
    (row / "run").rmdir()
    before = tree(row)
    assert {"reproduce_stamp", "eval_c4.json", "info.json", "hf", "analysis"} | OWN <= set(before)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{row}: moved" in again.stderr and "train: skipped" in again.stdout
    assert tree(row) == migrated(before)  # nothing retrained, re-evaluated or deleted
    # the same row asked for another run is still refused by its stamp
    other = subprocess.run(cmd + ["--set", "train.seed=7"], capture_output=True, text=True, timeout=600)
    assert other.returncode != 0 and "reproduce_stamp differs" in other.stderr
