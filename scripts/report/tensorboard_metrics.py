#!/usr/bin/env python3
"""Mirror kdtrain's metrics.jsonl into TensorBoard event files, once or live.

    python3 scripts/report/tensorboard_metrics.py RUN_DIR [RUN_DIR ...] [--follow] [--logdir DIR]
    tensorboard --logdir DIR

Each run directory's metrics.jsonl (one JSON object per step, docs/training.md)
becomes scalars under DIR/<run name>. A RUN_DIR may be a study row (ROW holding
run/, scripts/report/study_layout.py; the row names it). By default the event
files go beside the run, never into it (only `kdtrain train` writes in a run
directory): ROW/tensorboard for a row, else RUN_DIR/../tensorboard/<run name>, so
`tensorboard --logdir runs` shows every run of runs/:

  train/loss, train/kd, train/ce, train/soft_ce, train/lr, train/grad_norm
  val/loss, val/kd, val/ce, val/soft_ce        (the steps that validated)
  perf/tokens_per_s, perf/step_time_s, perf/peak_memory_gib
  attention/logit_mean_abs                     (paper Fig. 2)
  alpha_mean/layer_NN, alpha_ma/layer_NN       affine runs: per layer, mean over heads
  sinks/layer_NN                               sink runs: per layer, mean over heads

Any other numeric key lands under other/<key>. --follow keeps reading as the
run appends (every --interval seconds) until the run reaches train.steps (from
RUN_DIR/config.json) or Ctrl-C. A resumed run rewrites metrics.jsonl from its
checkpoint's step on; the mirror notices the step going back and marks a
restart (SessionLog START), so TensorBoard drops the superseded points.

Every invocation starts the mirror afresh: the event files it wrote before
(names ending .kdtrain) are replaced, never appended to twice. Needs the
`tensorboard` package (requirements.txt).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_layout import Row  # noqa: E402

SUFFIX = ".kdtrain"

# metrics.jsonl key -> TensorBoard tag; scale applied to the value. The losses are
# train/NAME, their validation values (val_NAME) val/NAME.
LOSSES = ("loss", "kd", "ce", "soft_ce")
SCALARS = {
    **{k: (f"train/{k}", 1.0) for k in LOSSES + ("lr", "grad_norm", "skipped_steps")},
    **{f"val_{k}": (f"val/{k}", 1.0) for k in LOSSES},
    "tokens_per_s": ("perf/tokens_per_s", 1.0),
    "step_time_s": ("perf/step_time_s", 1.0),
    "peak_memory_bytes": ("perf/peak_memory_gib", 1.0 / 2**30),
    "attn_logit_mean_abs": ("attention/logit_mean_abs", 1.0),
}
# Keys that are bookkeeping, not curves.
SKIP = {"step", "applied"}
# Per-layer lists (of numbers, or of per-head lists) drawn as one curve per layer.
PER_LAYER = ("alpha_mean", "alpha_ma", "sinks")


def scalars_of(record: dict) -> list[tuple[str, float]]:
    """(tag, value) pairs of one metrics record."""
    out = []
    for key, value in record.items():
        if key in SKIP:
            continue
        if key in PER_LAYER and isinstance(value, list):
            for layer, v in enumerate(value):
                if isinstance(v, list):
                    v = sum(v) / len(v) if v else None
                if isinstance(v, (int, float)):
                    out.append((f"{key}/layer_{layer:02d}", float(v)))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        tag, scale = SCALARS.get(key, ("other/" + key, 1.0))
        out.append((tag, float(value) * scale))
    return out


class Mirror:
    """One run's metrics.jsonl -> one TensorBoard event file."""

    def __init__(self, run_dir: str, logdir: str):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.logdir = logdir
        os.makedirs(logdir, exist_ok=True)
        for old in glob.glob(os.path.join(logdir, "events.out.tfevents.*" + SUFFIX)):
            os.unlink(old)
        self.writer = EventFileWriter(logdir, filename_suffix=SUFFIX)
        self.offset = 0
        self.inode = None
        self.last_step = 0
        self.points = 0
        self.total_steps = None
        config = os.path.join(run_dir, "config.json")
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                self.total_steps = json.load(f).get("train", {}).get("steps")

    def _event(self, step: int, **fields):
        from tensorboard.compat.proto import event_pb2

        return event_pb2.Event(wall_time=time.time(), step=step, **fields)

    def poll(self) -> int:
        """Reads the complete lines appended since the last poll; returns how many."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if not os.path.isfile(self.path):
            return 0
        st = os.stat(self.path)
        if st.st_ino != self.inode or st.st_size < self.offset:
            # Replaced (a resume rewrites it atomically) or truncated: read it again;
            # the steps going back purge the superseded points below.
            self.offset, self.inode = 0, st.st_ino
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        lines = data[:end].splitlines()
        self.offset += end
        count = 0
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line left by kill -9; the resumed run rewrites it
            step = record.get("step")
            if not isinstance(step, int):
                continue
            if step <= self.last_step:
                # The run resumed from step - 1: points after it are superseded.
                self.writer.add_event(self._event(step - 1, session_log=event_pb2.SessionLog(
                    status=event_pb2.SessionLog.START)))
            values = [summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in scalars_of(record)]
            self.writer.add_event(self._event(step, summary=summary_pb2.Summary(value=values)))
            self.last_step = step
            self.points += len(values)
            count += 1
        if count:
            self.writer.flush()
        return count

    def done(self) -> bool:
        return self.total_steps is not None and self.last_step >= self.total_steps

    def close(self):
        self.writer.close()


def default_logdir(run: str, logdir: str | None) -> str:
    """LOGDIR/<name>, else beside the run: ROW/tensorboard, or RUN_DIR/../tensorboard/<name>."""
    row = Row(Path(os.path.abspath(run)))
    if logdir:
        return os.path.join(logdir, row.name)
    if not row.flat:
        return str(row.result("tensorboard"))
    return str(row.path.parent / "tensorboard" / row.name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("runs", nargs="+", help="run directories (each holding metrics.jsonl)")
    p.add_argument("--logdir", help="write under LOGDIR/<run name> (default: beside each run, see above)")
    p.add_argument("--follow", action="store_true", help="keep mirroring as the runs append")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between reads with --follow (default 5)")
    args = p.parse_args(argv)
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print("tensorboard_metrics: the tensorboard package is not installed "
              "(pip install -r requirements.txt)", file=sys.stderr)
        return 1
    mirrors = []
    for run in args.runs:
        if not os.path.isdir(run):
            print(f"tensorboard_metrics: no such file or directory: {run}", file=sys.stderr)
            return 1
        mirrors.append(Mirror(str(Row(run).run), default_logdir(run, args.logdir)))
    try:
        while True:
            for m in mirrors:
                m.poll()
            if not args.follow or all(m.done() for m in mirrors):
                break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    for m in mirrors:
        m.close()
        print(f"{m.path}: {m.last_step} steps, {m.points} points -> {m.logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
