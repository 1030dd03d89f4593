#!/usr/bin/env python3
"""Where the scripts keep a training run and what is derived from it: the one
definition scripts/small_study.sh, scripts/reproduce.sh and scripts/report/*.py
share (docs/evaluation.md, "Run directory layout").

A row directory ROW holds one training run and, beside it, its results:

    ROW/run/                `kdtrain train --run-dir ROW/run`; only `train` writes in it
    ROW/info.json           `kdtrain info --config ROW/run/config.json --json`
    ROW/eval_c4.json        `kdtrain eval ... --out ROW/eval_c4.json`
    ROW/zero_shot.json      scripts/report/run_zero_shot.py --out ROW/zero_shot.json
    ROW/analysis/           `kdtrain analyze ... --out ROW/analysis` (analysis.json)
    ROW/hf/                 `kdtrain export ... --out ROW/hf`
    ROW/study_row.json      scripts/report/reproduce_tables.py: the row's model size
    ROW/study_stamp         scripts/small_study.sh: what trained the run
    ROW/reproduce_stamp     scripts/reproduce.sh: what trained the run
    ROW/report/             scripts/reproduce.sh's report of the row
    ROW/tensorboard/        scripts/report/tensorboard_metrics.py's event files

kdtrain refuses every output inside a run directory but `train`'s own
(docs/reliability.md, "The place rule"), so nothing derived goes into ROW/run.

Reading, a path names a row three ways: ROW (holding run/), ROW/run itself, or a
folder without run/, read flat (its run files and results side by side: a bare
run directory, or a copy made before this layout, as docs/results/small-study-cpu
keeps them).

    python3 scripts/report/study_layout.py ROW

prints the paths as shell assignments (ROW_RUN=..., ROW_EVAL_C4=..., one per
entry above) for the shell scripts to eval; they always name ROW/run, since a
script writes a new row.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

RUN = "run"
RESULTS = {
    "info": "info.json",
    "eval_c4": "eval_c4.json",
    "zero_shot": "zero_shot.json",
    "analysis": "analysis",
    "hf": "hf",
    "study_row": "study_row.json",
    "study_stamp": "study_stamp",
    "reproduce_stamp": "reproduce_stamp",
    "report": "report",
    "tensorboard": "tensorboard",
}
ANALYSIS_JSON = "analysis.json"  # what `kdtrain analyze --out DIR` writes in DIR


def written(row: Path, key: str) -> Path:
    """Where a script writes RESULTS[key] of the row it makes (a new row: always beside ROW/run)."""
    return Path(row) / RESULTS[key]


def run_written(row: Path) -> Path:
    """The run directory of a row a script makes: ROW/run."""
    return Path(row) / RUN


class Row:
    """A row as the readers see it: `run` holds config.json, metrics.jsonl and
    checkpoints/; result(key) is where RESULTS[key] lies."""

    def __init__(self, path: Path):
        path = Path(path)
        if (path / RUN).is_dir():
            self.path = path
        elif path.name == RUN and path.is_dir():
            self.path = path.parent
        else:
            self.path = path
        self.run = self.path / RUN if (self.path / RUN).is_dir() else self.path
        self.flat = self.run == self.path
        self.name = self.path.resolve().name if self.path.name in ("", ".", "..") else self.path.name

    def result(self, key: str) -> Path:
        return written(self.path, key)

    def analysis_json(self) -> Path:
        return self.result("analysis") / ANALYSIS_JSON


def shell_assignments(row: str) -> str:
    """ROW_RUN=ROW/run and ROW_<KEY>=ROW/<name> for every result, quoted for `eval`."""
    lines = [f"ROW_RUN={shlex.quote(str(run_written(row)))}"]
    lines += [f"ROW_{key.upper()}={shlex.quote(str(written(row, key)))}" for key in RESULTS]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(shell_assignments(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
