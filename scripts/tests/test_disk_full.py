"""A full disk never loses a run or leaves a half-written file.

The red team filled the disk under a run: metrics.jsonl stopped mid-record at
step 87 while the console logged to step 200. Here the failures are real ENOSPC
errors, not mocks:
  - metrics.jsonl or standard output as a link to / redirect into /dev/full
    (every write fails with ENOSPC, everything else has room), or standard
    output a pipe whose reader has exited (EPIPE, not SIGPIPE): the run stops
    with an error naming the file, after writing a checkpoint that keeps the
    unwritten record, and a resume reads as one uninterrupted run;
  - a small tmpfs mounted in a private mount namespace (unshare), filling during
    the metrics and during a checkpoint: only whole records, no torn or staging
    files, `latest` untouched; after the mount is enlarged the run resumes and
    matches an uninterrupted run exactly. Skips, saying why, where the test
    environment cannot mount a tmpfs.
"""

import json
import shutil
import struct
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from repo_paths import KDTRAIN  # noqa: E402

pytestmark = pytest.mark.skipif(not KDTRAIN.exists(), reason=f"{KDTRAIN} not built")


def write_shard(path: Path, n: int = 20000, seed: int = 7) -> str:
    """llm.c uint16 shard of pseudo-text bytes."""
    x, tokens = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        tokens.append(32 if (x >> 33) % 4 == 0 else 97 + (x >> 40) % 26)
    header = [20240520, 1, n] + [0] * 253
    path.write_bytes(struct.pack("<256i", *header) + struct.pack(f"<{n}H", *tokens))
    return str(path)


def train_args(shard: str, run_dir: Path, steps: int = 12, interval: int = 4) -> list:
    return [str(KDTRAIN), "train", "--preset", "tiny-llama", "--set", f"data.train={shard}",
            "--set", "train.seq_len=32", "--set", "train.global_batch=4", "--set", "train.micro_batch=2",
            "--set", f"train.steps={steps}", "--set", "schedule.warmup=1", "--set", "train.threads=1",
            "--set", f"checkpoint.interval={interval}", "--set", "checkpoint.keep=1", "--run-dir", str(run_dir)]


def records(run_dir: Path) -> list:
    text = (run_dir / "metrics.jsonl").read_text()
    assert text == "" or text.endswith("\n"), "torn last record"
    return [json.loads(line) for line in text.splitlines()]


def trajectory(rows: list) -> list:
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in rows]


def latest(run_dir: Path) -> str:
    return (run_dir / "checkpoints" / "latest").read_text().strip()


def leftovers(run_dir: Path) -> list:
    return [str(p) for p in run_dir.rglob("*") if ".tmp." in p.name or ".old." in p.name]


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> str:
    return write_shard(tmp_path_factory.mktemp("data") / "train.bin")


@pytest.fixture(scope="module")
def reference(shard, tmp_path_factory) -> list:
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    subprocess.run(train_args(shard, run_dir), check=True, capture_output=True)
    return trajectory(records(run_dir))


def test_metrics_write_failure_stops_after_a_checkpoint_and_loses_nothing(shard, reference, tmp_path):
    run_dir = tmp_path / "run"
    # A run directory of kdtrain's own that holds no checkpoint (train starts only in such a one,
    # or a new or empty one), whose metrics file then lands on a full device: a link to
    # /dev/full, the one link kdtrain writes through.
    subprocess.run(train_args(shard, run_dir, steps=1), check=True, capture_output=True)
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").symlink_to("/dev/full")
    r = subprocess.run(train_args(shard, run_dir), capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr  # 0 before: every record silently dropped
    assert "metrics.jsonl" in r.stderr and "No space left on device" in r.stderr, r.stderr
    assert "checkpoint at step 1" in r.stderr, r.stderr
    assert latest(run_dir) == "step_00000001"
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").write_text("")
    r = subprocess.run([str(KDTRAIN), "train", "--resume", str(run_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # Step 1's record, which never reached the file, came back from the checkpoint.
    assert trajectory(records(run_dir)) == reference


def test_console_write_failure_stops_the_run(shard, tmp_path):
    run_dir = tmp_path / "run"
    with open("/dev/full", "w") as full:
        r = subprocess.run(train_args(shard, run_dir), stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1, r.stderr
    assert "standard output" in r.stderr and "No space left on device" in r.stderr, r.stderr
    assert latest(run_dir) == "step_00000001"


def test_console_pipe_whose_reader_exits_stops_the_run_after_a_checkpoint(shard, reference, tmp_path):
    """`kdtrain train ... | head` or a log shipper that restarts: the pipe's reader is gone.
    Before: SIGPIPE killed the run (returncode -13) with no checkpoint and no message."""
    run_dir = tmp_path / "run"
    job = subprocess.Popen(train_args(shard, run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job.stdout.close()  # the reader exits before the first line
    err = job.stderr.read()
    job.wait()
    assert job.returncode == 1, (job.returncode, err)
    assert "standard output" in err and "checkpoint at step 1" in err, err
    assert latest(run_dir) == "step_00000001"
    r = subprocess.run([str(KDTRAIN), "train", "--resume", str(run_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert trajectory(records(run_dir)) == reference


def test_info_to_a_full_disk_is_an_error():
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(KDTRAIN), "info", "--preset", "tiny-llama"], stdout=full, stderr=subprocess.PIPE,
                           text=True)
    assert r.returncode == 1 and "standard output" in r.stderr, r.stderr


def unshare_prefix():
    """A command prefix that runs in a private mount namespace where mounting works, or None."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        return None
    for prefix in (["unshare", "-m", "--propagation", "private"], ["unshare", "-rm", "--propagation", "private"]):
        probe = subprocess.run(prefix + ["sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                                         "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


def in_tmpfs(prefix, mount: Path, size: str, script: str) -> subprocess.CompletedProcess:
    """Runs `script` (sh) with a tmpfs of `size` mounted on `mount`, visible to nothing else."""
    body = f"mount -t tmpfs -o size={size} tmpfs {mount} || exit 77\n" + textwrap.dedent(script)
    return subprocess.run(prefix + ["sh", "-c", body], capture_output=True, text=True)


def test_tmpfs_full_during_metrics_and_checkpoint(shard, reference, tmp_path):
    prefix = unshare_prefix()
    if prefix is None:
        pytest.skip("cannot mount a tmpfs here (no unshare, or mounting is not permitted)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    cmd = " ".join(f"'{a}'" for a in train_args(shard, mount / "run", steps=12, interval=4))

    # 1. Full during the metrics: 12 KiB holds the config and lock, then a few records.
    r = in_tmpfs(prefix, mount, "12k", f"""
        {cmd} --set checkpoint.interval=0 --set train.steps=400 > {out}/a.log 2>&1; echo $? > {out}/a.rc
        cp -r {mount}/run {out}/a
    """)
    assert r.returncode == 0, r.stderr
    log = (out / "a.log").read_text()
    assert (out / "a.rc").read_text().strip() == "1", log
    assert "metrics.jsonl" in log and "No space left on device" in log, log
    rows = records(out / "a")  # whole records only
    assert rows and [row["step"] for row in rows] == list(range(1, len(rows) + 1))
    assert not (out / "a" / "checkpoints" / "latest").exists() and not leftovers(out / "a")

    # 2. Full during the second checkpoint (the first fits): `latest` stays on the first,
    #    nothing half-written remains, and after the mount grows the run resumes
    #    and ends exactly as the uninterrupted run.
    # A checkpoint of this run is ~1.3 MB: 2 MiB hold one, not the two that exist while
    # the second is staged (checkpoint.keep=1).
    r = in_tmpfs(prefix, mount, "2m", f"""
        {cmd} > {out}/b.log 2>&1; echo $? > {out}/b.rc
        cp -r {mount}/run {out}/b
        mount -o remount,size=64m {mount}
        '{KDTRAIN}' train --resume {mount}/run > {out}/c.log 2>&1; echo $? > {out}/c.rc
        cp -r {mount}/run {out}/c
    """)
    assert r.returncode == 0, r.stderr
    log_b = (out / "b.log").read_text()
    assert (out / "b.rc").read_text().strip() == "1", log_b
    assert "No space left on device" in log_b, log_b
    assert latest(out / "b") == "step_00000004", log_b
    assert not leftovers(out / "b"), leftovers(out / "b")
    assert (out / "c.rc").read_text().strip() == "0", (out / "c.log").read_text()
    assert trajectory(records(out / "c")) == reference
