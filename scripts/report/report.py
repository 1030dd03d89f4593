#!/usr/bin/env python3
"""The paper's Tables 1-5 and Figures 2-11 from kdtrain runs.

    python3 scripts/report/report.py ROW... --out DIR [--title T] [--note TEXT]...

Each ROW is a study row (scripts/report/study_layout.py; docs/evaluation.md, "Run
directory layout"): the training run in ROW/run, and beside it what was derived from it.
A folder without run/ (a bare run directory, or a copy made before that layout) is
read flat. The files read:
    run/config.json          resolved config (written by `kdtrain train`)   model, variant, α activation
    run/metrics.jsonl        per-step metrics (written by `kdtrain train`)  loss, grad-norm curves
    info.json                `kdtrain info --config ROW/run/config.json --json` ΔParams (else computed)
    eval_c4.json             `kdtrain eval ... --out ROW/eval_c4.json`       C4 PPL, C4 BPB, C4 word PPL
    zero_shot.json           scripts/report/run_zero_shot.py --out ROW/zero_shot.json
    analysis/analysis.json   `kdtrain analyze ... --out ROW/analysis`        Figs. 3-6, 9
    study_row.json           scripts/report/reproduce_tables.py              the model-size label
Missing pieces leave empty cells or skip a figure; they are never an error.

Writes to DIR: table1..table5 .md and .csv (Table 1: baseline / sink / affine;
Table 2: baseline / gated / affine-gated; Tables 1-2 take the paper's linear-clip
α; Table 3: every affine run labelled with its α activation; Tables 4-5: every
run, over the steps actually used), figures fig2..fig11 PNG, and index.md that
gathers them with the runs and what each column measured.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_figures import figures  # noqa: E402
from report_runs import (LOGIT_KEY, Run, delta_params_from_config, kdtrain_info,  # noqa: E402,F401
                         read_metrics)
from report_tables import (MAIN_COLUMNS, ZERO_SHOT, grad_norm_stats, spike_count,  # noqa: E402,F401
                           tables)


def runs_section(runs: list[Run]) -> list[str]:
    lines = ["## Runs", "", "| Run | Model | Method | steps logged | directory |", "|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.name} | {r.model} | {r.method(with_alpha=True)} | {r.last_step()} | "
                     f"`{r.path}` |")
    return lines + [""]


def index_page(runs: list[Run], parts: list[tuple[str, str]], made: list[tuple[str, str]], title: str,
               notes: list[str]) -> str:
    doc = [f"# {title}", ""]
    doc += [f"> {n}" for n in notes] + ([""] if notes else [])
    doc += ["Columns and figures are defined in docs/evaluation.md (\"Report\") and "
            "docs/analysis.md; each table's notes say what its numbers measured here.", ""]
    doc += runs_section(runs)
    doc += ["## Tables", ""]
    for stem, md in parts:
        doc += [md, f"Files: `{stem}.md`, `{stem}.csv`.", ""]
    doc += ["## Figures", ""]
    if not made:
        doc += ["(none: matplotlib missing or --no-figures)", ""]
    for name, caption in made:
        doc += [f"**{caption}** — `{name}`", "", f"![{caption}]({name})", ""]
    return "\n".join(doc) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="study rows (ROW holding run/) or run directories")
    p.add_argument("--out", required=True, type=Path, help="report directory")
    p.add_argument("--loss-steps", type=int, default=20,
                   help="final training loss = mean of the last N logged steps (default 20)")
    p.add_argument("--early-steps", type=int, default=500,
                   help="Tables 4 and 5 use steps 1..N (default 500)")
    p.add_argument("--late-fraction", type=float, default=2 / 9,
                   help="Fig. 10 shows the last fraction of steps (default 2/9: 7k-9k of 9k)")
    p.add_argument("--kdtrain", default=None,
                   help="kdtrain binary for ΔParams via `kdtrain info --json` (default: from config)")
    p.add_argument("--title", default="kdtrain report", help="heading of index.md")
    p.add_argument("--note", action="append", default=[],
                   help="a line to put under the heading (repeatable)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    a = p.parse_args(argv)
    for r in a.runs:
        if not r.is_dir():
            p.error(f"{r}: not a directory")
    runs = sorted((Run(r, a.kdtrain) for r in a.runs), key=Run.sort_key)
    a.out.mkdir(parents=True, exist_ok=True)
    parts = tables(runs, a.out, a.loss_steps, a.early_steps)
    made: list[tuple[str, str]] = []
    if not a.no_figures:
        try:
            made = figures(runs, a.out, a.late_fraction)
        except ImportError:
            print("report: matplotlib is not installed (pip install -r requirements-eval.txt); "
                  "figures skipped", file=sys.stderr)
    (a.out / "index.md").write_text(index_page(runs, parts, made, a.title, a.note), encoding="utf-8")
    print(f"report: {len(runs)} runs -> {a.out}/index.md (5 tables, {len(made)} figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
