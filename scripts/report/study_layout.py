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

    python3 scripts/report/study_layout.py migrate ROW...

moves a flat row (a study or reproduce.sh folder made before this layout: the
run's own files and its results side by side in ROW) into this layout: the
run's own files (RUN_OWN) go into ROW/run, the results stay where they are, so a
rerun of the script finds its finished stages and stamp. Nothing is deleted or
overwritten. Every row named is checked before any is touched; a row holding
anything but a run's files and the results above, a row with both its own files
and run/, or a run in use (its lock held) is refused, naming the row, what is in
the way and the commands to resolve it. The moves go through ROW/.run.migrating,
renamed to ROW/run last: an interrupted migration is finished by the next one.
An empty ROW/run beside the run's files (a rerun of a script before this
migration made it, then kdtrain refused to train there) becomes that folder.
Paths that are not directories, and rows already laid out, are left alone.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
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
# A training run's own files (src/io/run_layout.h): what a flat row moves into ROW/run.
RUN_OWN = ("kdtrain.lock", "config.json", "metrics.jsonl", "checkpoints")
RUN_LOCK = "kdtrain.lock"
MIGRATING = ".run.migrating"  # where a migration gathers the run's files before naming it ROW/run


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


class MigrationRefused(Exception):
    pass


def hand_commands(row: Path) -> str:
    """The commands that migrate a flat row by hand, for a refusal's message."""
    q = shlex.quote(str(row))
    own = " ".join(f"{q}/{name}" for name in RUN_OWN if os.path.lexists(row / name))
    return f"mkdir -p {q}/{RUN} && mv {own} {q}/{RUN}/"


def left_empty(row: Path) -> bool:
    """Whether ROW/run is the empty directory a script's rerun on the flat row made (`mkdir -p
    ROW/run` before kdtrain refused it), which the migration can gather the run in."""
    run = row / RUN
    return (not run.is_symlink() and run.is_dir() and not os.listdir(run)
            and not os.path.lexists(row / MIGRATING))


def flat_entries(row: Path) -> list[str]:
    """The run files a flat row still has to move ([] for a row already laid out, a
    folder of results alone, or no directory); raises MigrationRefused when the row
    is neither layout."""
    if row.is_symlink() or not row.is_dir():
        return []
    names = sorted(os.listdir(row))
    own = [n for n in names if n in RUN_OWN]
    staged = row / MIGRATING
    if not own and not os.path.lexists(staged):
        return []
    if os.path.lexists(row / RUN) and not left_empty(row):
        raise MigrationRefused(f"{row} holds both {RUN}/ and a run's own files ({', '.join(own)}): "
                               f"which is the run is not clear; move one of them out of {row}")
    stray = [n for n in names if n not in RUN_OWN and n not in RESULTS.values() and n not in (MIGRATING, RUN)]
    if stray:
        raise MigrationRefused(f"{row} is a row in the old flat layout, and {', '.join(stray)} "
                               f"{'is' if len(stray) == 1 else 'are'} neither the run's own file nor a "
                               f"result of the scripts; move {'it' if len(stray) == 1 else 'them'} out of "
                               f"{row} and rerun, or migrate by hand: {hand_commands(row)}")
    if os.path.lexists(staged):
        if staged.is_symlink() or not staged.is_dir():
            raise MigrationRefused(f"{staged} is not a directory; move it out of {row} and rerun")
        inside = sorted(os.listdir(staged))
        unknown = [n for n in inside if n not in RUN_OWN]
        both = [n for n in own if n in inside]
        if unknown or both:
            raise MigrationRefused(f"{staged} (an interrupted migration) holds {', '.join(unknown + both)}, "
                                   f"which {'is not a run file' if unknown else f'{row} holds too'}; "
                                   f"sort {row} out by hand: {hand_commands(row)}")
    return own


def take_run_lock(row: Path):
    """The flat row's run lock (flock on kdtrain.lock, as `kdtrain train` takes it), held by
    the open file returned (None without a lock file) until it is closed, so no train starts
    while the files move; MigrationRefused when a running train holds it."""
    for lock in (row / RUN_LOCK, row / MIGRATING / RUN_LOCK):
        if lock.is_file() and not lock.is_symlink():
            f = open(lock, "rb")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                raise MigrationRefused(f"{row} holds a run in use (its {RUN_LOCK} is locked by a running "
                                       f"kdtrain train); rerun when it has finished") from None
            return f
    return None


_RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)


def rename_noreplace(src: Path, dst: Path) -> None:
    """rename(2) that never replaces dst (renameat2 RENAME_NOREPLACE; where the
    kernel or filesystem lacks it, a check just before a plain rename)."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is not None:
        at_fdcwd = -100
        if renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), str(src), None, str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "refusing to replace", str(dst))
    os.rename(src, dst)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def migrate_row(row: Path, own: list[str]) -> None:
    """Moves the run's own files of a checked flat row into ROW/run, through ROW/.run.migrating."""
    staged = row / MIGRATING
    if left_empty(row):
        rename_noreplace(row / RUN, staged)
    elif not staged.is_dir():
        os.mkdir(staged)
    for name in own:
        rename_noreplace(row / name, staged / name)
    fsync_dir(staged)
    rename_noreplace(staged, row / RUN)
    fsync_dir(row)


def migrate(rows: list[Path]) -> int:
    """Checks every row, then migrates the flat ones; 1 (touching none) when one is refused."""
    plan, refused = [], []
    try:
        for row in map(Path, rows):
            try:
                own = flat_entries(row)
                if own or os.path.lexists(row / MIGRATING):
                    plan.append((row, own, take_run_lock(row)))
            except MigrationRefused as e:
                refused.append(str(e))
        for message in refused:
            print(f"study_layout.py migrate: {message}", file=sys.stderr)
        if refused:
            print("study_layout.py migrate: nothing was moved", file=sys.stderr)
            return 1
        for row, own, _ in plan:
            migrate_row(row, own)
            print(f"study_layout.py migrate: {row}: moved {', '.join(own) or 'the staged files'} into "
                  f"{row / RUN} (the flat layout before {RUN}/); its results stay beside it", file=sys.stderr)
        return 0
    finally:
        for _, _, lock in plan:
            if lock is not None:
                lock.close()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "migrate":
        return migrate([Path(a) for a in argv[1:]])
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(shell_assignments(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
