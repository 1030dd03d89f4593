#!/usr/bin/env python3
"""The paper's Tables 1-5 and Figures 2-10 by one command (`scripts/reproduce.sh --tables`).

    scripts/reproduce.sh --tables --teachers DIR --out OUT [--fineweb FILE...] [--c4 FILE]
        [--device cuda] [--launch "mpirun -np 8"] [--only NAME_OR_SIZE...] [--smoke] ...

Runs every row of configs/paper/study.json (three sizes x the variants of Tables
1-3, plus the sigmoid-α affine run of Table 3), each through `scripts/reproduce.sh`
(prepare data, train by distillation, export, C4 perplexity, attention analysis;
finished stages are skipped, an interrupted training run is resumed) into the
row OUT/runs/NAME (the run in OUT/runs/NAME/run, its results beside it:
scripts/report/study_layout.py), then the
six zero-shot tasks of every run in one scripts/report/run_zero_shot.py process, then
scripts/report/report.py over all of them into OUT/report (index.md, table1..5 .md
and .csv, fig2..fig10 PNG). Teachers are DIR/<teacher name of the size>
(Qwen1.5-1.8B, Llama-3.2-3B, Llama-3.1-8B: Hugging Face directories), or
--teacher SIZE=PATH each.

--smoke runs the identical pipeline on the same configs with the plan's smoke
overrides (tiny models of each size's family and real vocabulary, a few steps,
zero-shot --limit 2), the FineWeb-Edu / C4 slices of ../shared/data, and one
teacher per size trained here with cross-entropy first (OUT/teachers/SIZE): no
downloads, CPU, minutes. docs/reproduce.md has the measured times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_layout import migrate, written  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
PLAN = REPO / "configs" / "paper" / "study.json"


def log(msg: str) -> None:
    print(f"[tables {time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def load_plan(path: Path) -> dict:
    plan = json.loads(path.read_text(encoding="utf-8"))
    for run in plan["runs"]:
        if run["size"] not in plan["sizes"]:
            raise SystemExit(f"{path}: run {run} names size {run['size']!r}, not one of "
                             f"{', '.join(plan['sizes'])}")
        run.setdefault("name", f"{run['size']}-{run['attention']}")
        run.setdefault("set", [])
    names = [r["name"] for r in plan["runs"]]
    if len(set(names)) != len(names):
        raise SystemExit(f"{path}: run names repeat: {names}")
    return plan


def select(plan: dict, only: list[str]) -> list[dict]:
    """The runs named, or all runs of the sizes named, in plan order."""
    if not only:
        return plan["runs"]
    known = {r["name"] for r in plan["runs"]} | set(plan["sizes"])
    unknown = [o for o in only if o not in known]
    if unknown:
        raise SystemExit(f"--only {' '.join(unknown)}: not a run or size of the plan "
                         f"(runs: {', '.join(r['name'] for r in plan['runs'])})")
    return [r for r in plan["runs"] if r["name"] in only or r["size"] in only]


def run_cmd(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}")


def sets(items: list[str]) -> list[str]:
    return [x for item in items for x in ("--set", item)]


def final_step_dir(run_dir: Path) -> Path | None:
    """The final checkpoint of a finished kdtrain run, else None."""
    latest, config = run_dir / "checkpoints" / "latest", run_dir / "config.json"
    if not latest.exists() or not config.exists():
        return None
    want = "step_%08d" % json.loads(config.read_text())["train"]["steps"]
    return run_dir / "checkpoints" / want if latest.read_text().strip() == want else None


def smoke_teacher(a, plan: dict, size: str, data_dir: Path) -> Path:
    """Trains (or resumes, or finds) the size's CE teacher for --smoke."""
    run_dir = a.out / "teachers" / size
    done = final_step_dir(run_dir)
    if done:
        log(f"teacher {size}: done already ({done})")
        return done
    spec, smoke = plan["sizes"][size], plan["smoke"]
    fw = data_dir / "fineweb_edu"
    if (run_dir / "checkpoints" / "latest").exists():
        log(f"teacher {size}: resuming")
        run_cmd([a.kdtrain, "train", "--resume", str(run_dir)])
    else:
        log(f"teacher {size}: training with cross-entropy")
        data = json.loads((REPO / spec["config"]).read_text())["data"]  # its shard names, as reproduce.sh
        run_cmd([a.kdtrain, "train", "--config", spec["config"],
                 *sets(smoke["set"] + spec["smoke_teacher"] + smoke["teacher_set"]),
                 "--set", f"data.train={fw / Path(data['train']).name}",
                 "--set", f"data.val={fw / Path(data['val']).name}",
                 "--set", f"train.device={a.device}", "--run-dir", str(run_dir)])
    done = final_step_dir(run_dir)
    if not done:
        raise RuntimeError(f"teacher {size}: {run_dir} did not reach its final step")
    return done


def zero_shot(a, rows: list[Path]) -> bool:
    """The six zero-shot tasks for every run without zero_shot.json, in one
    run_zero_shot.py process (lm-eval, transformers and torch start once, not once
    per run); each JSON is written as its model finishes. False if it failed."""
    todo = [r for r in rows if not written(r, "zero_shot").exists()]
    if not todo:
        log("zero-shot: skipped, every run has zero_shot.json")
        return True
    log(f"zero-shot (six tasks) for {len(todo)} run(s): {' '.join(r.name for r in todo)}")
    cmd = [sys.executable, str(REPO / "scripts" / "report" / "run_zero_shot.py"),
           "--model", *[str(written(r, "hf")) for r in todo], "--out", *[str(written(r, "zero_shot")) for r in todo],
           "--device", a.device]
    for flag, value in (("--limit", a.limit), ("--eval-data", a.eval_data), ("--batch-size", a.batch_size)):
        if value:
            cmd += [flag, str(value)]
    try:
        run_cmd(cmd)
    except RuntimeError as e:
        log(f"zero-shot: FAILED ({e})")
        return False
    return True


def teacher_of(a, plan: dict, size: str) -> Path:
    if size in a.teacher_map:
        return a.teacher_map[size]
    if not a.teachers:
        raise SystemExit(f"no teacher for {size}: pass --teachers DIR (with "
                         f"{plan['sizes'][size]['teacher']}) or --teacher {size}=PATH, or --smoke")
    return a.teachers / plan["sizes"][size]["teacher"]


# What a full study needs in place of each shipped slice of ../shared/data (docs/reproduce.md).
FULL_DATA = {
    "--fineweb": "FineWeb-Edu sample-10BT: HuggingFaceFW/fineweb-edu, sample/10BT/*.parquet",
    "--c4": "C4 validation: allenai/c4, en/c4-validation.*.json.gz",
    "--eval-data": ("a directory with the full lm-eval splits: arc/ARC-Easy-Test.jsonl (2,376), "
                    "arc/ARC-Challenge-Test.jsonl (1,172), boolq/dev.jsonl (3,270), piqa/valid.jsonl + "
                    "valid-labels.lst (1,838), hellaswag/hellaswag_val.jsonl (10,042), "
                    "winogrande/dev.jsonl of winogrande_xl (1,267); file names in docs/evaluation.md"),
}


def shipped_slices(a) -> list[str]:
    """The inputs of a full study that still point at the shipped slices of ../shared/data."""
    def shipped(path) -> bool:
        return path is None or Path(path).resolve().is_relative_to(SHARED.resolve())
    given = {"--fineweb": a.fineweb, "--c4": [a.c4], "--eval-data": [a.eval_data]}
    return [flag for flag, paths in given.items() if any(shipped(p) for p in paths)]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--out", required=True, type=Path, help="study directory (runs/NAME rows as study_layout.py lays them out, data/, report/)")
    p.add_argument("--plan", type=Path, default=PLAN, help=f"study plan (default {PLAN.relative_to(REPO)})")
    p.add_argument("--smoke", action="store_true", help="tiny configs, ../shared/data, CE teachers")
    p.add_argument("--teachers", type=Path, help="directory holding the plan's teacher directories")
    p.add_argument("--teacher", action="append", default=[], metavar="SIZE=PATH",
                   help="the teacher of one size (repeatable; overrides --teachers)")
    p.add_argument("--tokenizers", type=Path, default=SHARED / "tokenizers",
                   help="directory with the plan's tokenizers (default ../shared/data/tokenizers)")
    p.add_argument("--fineweb", nargs="+", default=[str(SHARED / "text" / "fineweb_edu_sample10BT.rows000-099.csv")],
                   help="FineWeb-Edu inputs (parquet/jsonl/csv; default: the 100-document sample)")
    p.add_argument("--c4", default=str(SHARED / "text" / "c4_validation_2k.rows0000-0999.jsonl"),
                   help="C4 validation input (default: the 1000-document slice)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda, cpu with --smoke)")
    p.add_argument("--launch", default="", help='training launcher, e.g. "mpirun -np 8"')
    p.add_argument("--only", nargs="+", default=[], help="run names or sizes to do (default: all)")
    p.add_argument("--set", action="append", default=[], help="override for every run (repeatable)")
    p.add_argument("--limit", type=int, help="zero-shot on the first N items of each task")
    p.add_argument("--eval-data", type=Path, help="zero-shot data (full splits; run_zero_shot.py)")
    p.add_argument("--eval-windows", type=int, help="C4 perplexity over the first N windows only")
    p.add_argument("--analyze-seqs", type=int, help="attention analysis sequences (default 10)")
    p.add_argument("--val-tokens", type=int, help="FineWeb-Edu validation tokens (default 10M)")
    p.add_argument("--max-tokens", type=int, help="stop FineWeb-Edu preparation after N tokens "
                   "(validation + training; docs/reproduce.md: 18,884,368,000 for one epoch)")
    p.add_argument("--batch-size", type=int, help="zero-shot batch size")
    p.add_argument("--keep-going", action="store_true", help="continue after a failed run")
    p.add_argument("--no-figures", action="store_true", help="report tables only (report.py --no-figures)")
    p.add_argument("--kdtrain", default=os.environ.get("KDTRAIN", str(REPO / "build" / "kdtrain")))
    a = p.parse_args(argv)
    a.device = a.device or ("cpu" if a.smoke else "cuda")
    a.teacher_map = {}
    for item in a.teacher:
        size, sep, path = item.partition("=")
        if not sep:
            p.error(f"--teacher {item}: expected SIZE=PATH")
        a.teacher_map[size] = Path(path)
    slices = [] if a.smoke else shipped_slices(a)
    if slices:
        raise SystemExit(
            "reproduce --tables: the full study needs full data, not the half-size slices shipped in "
            f"{SHARED} (use --smoke to run the pipeline on them). Fetch and pass:\n"
            + "\n".join(f"  {flag} {FULL_DATA[flag]}" for flag in slices))
    if a.smoke:
        smoke = load_plan(a.plan)["smoke"]
        for key in ("limit", "eval_windows", "analyze_seqs", "val_tokens"):
            if getattr(a, key) is None:
                setattr(a, key, smoke[key])
    if not Path(a.kdtrain).exists():
        p.error(f"{a.kdtrain} is not built (cmake -S . -B build && cmake --build build)")
    return a


def main(argv=None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    plan = load_plan(a.plan)
    runs = select(plan, a.only)
    a.out.mkdir(parents=True, exist_ok=True)
    # Rows made before the run/ layout move their runs into ROW/run before any row runs.
    if migrate([a.out / "runs" / r["name"] for r in runs]) != 0:
        raise SystemExit("reproduce_tables: rows not migrated (above)")
    reproduce = str(REPO / "scripts" / "reproduce.sh")
    started = time.monotonic()
    timings = [("stage", "seconds")]
    failed = []
    teachers: dict[str, Path] = {}
    for run in runs:
        size, name = run["size"], run["name"]
        spec = plan["sizes"][size]
        tokenizer = a.tokenizers / spec["tokenizer"]
        data_dir = a.out / "data" / spec["tokenizer"]
        common = ["--data-dir", str(data_dir), "--tokenizer", str(tokenizer),
                  "--fineweb", *a.fineweb, "--c4", a.c4, "--kdtrain", a.kdtrain]
        for flag, value in (("--val-tokens", a.val_tokens), ("--max-tokens", a.max_tokens)):
            if value is not None:
                common += [flag, str(value)]
        t0 = time.monotonic()
        try:
            if size not in teachers:
                if a.smoke:
                    run_cmd(["bash", reproduce, "--prepare-only", *common])
                    teachers[size] = smoke_teacher(a, plan, size, data_dir)
                else:
                    teachers[size] = teacher_of(a, plan, size)
            row_dir = a.out / "runs" / name  # the row: run/ and its results (study_layout.py)
            overrides = (plan["smoke"]["set"] + spec["smoke_student"] if a.smoke else []) + run["set"] + a.set
            cmd = ["bash", reproduce, "--config", spec["config"], "--attention", run["attention"],
                   "--teacher", str(teachers[size]), "--out", str(row_dir), "--device", a.device,
                   "--no-report", "--no-zero-shot", *common, *sets(overrides)]
            for flag, value in (("--launch", a.launch), ("--eval-windows", a.eval_windows),
                                ("--analyze-seqs", a.analyze_seqs)):
                if value:
                    cmd += [flag, str(value)]
            log(f"{name}: {size} {run['attention']} {' '.join(run['set'])}".rstrip())
            run_cmd(cmd)
            written(row_dir, "study_row").write_text(json.dumps(
                {"size": size, "name": name, "smoke": a.smoke, "plan": str(a.plan)}) + "\n")
        except (RuntimeError, SystemExit) as e:
            failed.append(name)
            log(f"{name}: FAILED ({e})")
            if not a.keep_going:
                raise SystemExit(f"reproduce_tables: {name} failed; rerun to resume "
                                 "(--keep-going continues past a failed run)")
        timings.append((name, f"{time.monotonic() - t0:.1f}"))

    done = [a.out / "runs" / r["name"] for r in runs if r["name"] not in failed]
    t0 = time.monotonic()
    if not zero_shot(a, done):
        failed.append("zero-shot")
        if not a.keep_going:
            raise SystemExit("reproduce_tables: zero-shot failed; rerun to resume (finished "
                             "models keep their zero_shot.json)")
    timings.append(("zero-shot", f"{time.monotonic() - t0:.1f}"))
    title = "kdtrain: the paper's Tables 1–5" + (" — SMOKE RUN" if a.smoke else "")
    plan_name = a.plan.resolve().relative_to(REPO) if a.plan.resolve().is_relative_to(REPO) else a.plan
    notes = [f"Plan `{plan_name}`, {len(done)} runs, device {a.device}; built by `scripts/reproduce.sh --tables"
             + (" --smoke" if a.smoke else "") + "`."]
    if a.smoke:
        notes.append("Smoke run: tiny models of each size's family, a few steps, teachers trained "
                     "here with CE, zero-shot on the first items only. It checks the pipeline; its "
                     "numbers carry no information about the paper's claims.")
    if failed:
        notes.append(f"Failed runs, not in the tables: {', '.join(failed)}.")
    report = [sys.executable, str(REPO / "scripts" / "report" / "report.py"), *map(str, done),
              "--out", str(a.out / "report"), "--kdtrain", a.kdtrain, "--title", title]
    for n in notes:
        report += ["--note", n]
    if a.no_figures:
        report.append("--no-figures")
    t0 = time.monotonic()
    run_cmd(report)
    timings += [("report", f"{time.monotonic() - t0:.1f}"), ("total", f"{time.monotonic() - started:.1f}")]
    (a.out / "timings.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in timings))
    log(f"done in {time.monotonic() - started:.0f}s: {a.out / 'report' / 'index.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
