#!/usr/bin/env python3
"""How much an affine model's evaluation moves between the two inference N of the
`sequence` divisor (docs/model.md, "The affine divisor at inference"): N fixed at the
training length (`train_length`) and N = the keys of each call (`keys`).

    scripts/report/affine_inference_n.py RUN_DIR... --c4 'DATA/c4/c4_val_*.bin' \\
        --tokenizer DIR --out DIR [--seq-lens 128 64] [--max-windows 256] [--num-seqs 10]
        [--limit 100] [--kdtrain build/kdtrain] [--no-zero-shot]

RUN_DIR is a training run (a small-study student: its row STUDY/runs/NAME, or
the run directory itself, scripts/report/study_layout.py) whose latest checkpoint is
an affine model with the `sequence` divisor; OUT/NAME gets its files. For each run
and each N this runs `kdtrain eval` on C4 and `kdtrain analyze` at every --seq-lens (the first should be the training length,
where the two N agree by construction; a shorter one is where they differ, as the
paper-scale analysis's 1024-token windows on 2048-token models), `kdtrain export
--affine-n N` and scripts/run_zero_shot.py on the export with per-item
log-likelihoods (the `keys` export is scored one request at a time, the
`train_length` one in batches). A finished step is skipped on a rerun.

Writes OUT/affine_n.csv, one row per (run, quantity, length) with both values and the
change, and prints the same as a markdown table. The quantities: C4 perplexity; Fig. 3
(each query's weight sum: mean, median, min, max), Fig. 4 (first-token weight), Fig. 5
(head x layer mass: mean, and the largest change of a cell), Fig. 6 (entropy), mean
alpha; zero-shot average, the share of items whose chosen answer changes, the mean
|change| of a choice's log-likelihood, and the wall seconds and batch size of each
zero-shot run.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # scripts/report, beside run_zero_shot.py
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from study_layout import Row  # noqa: E402

NS = ("train_length", "keys")


def run_cmd(cmd: list[str], done: Path) -> None:
    """Runs cmd unless `done` exists (a finished step)."""
    if done.exists():
        return
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def mean(values) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def flat(x) -> list:
    if isinstance(x, list):
        return [v for item in x for v in flat(item)]
    return [x] if isinstance(x, (int, float)) else []


def analysis_quantities(a: dict) -> dict:
    """The Fig. 3-6 numbers of one analysis.json."""
    ws = a.get("query_weight_sum") or {}
    return {
        "fig3_weight_sum_mean": ws.get("mean"),
        "fig3_weight_sum_median": ws.get("median"),
        "fig3_weight_sum_min": ws.get("min"),
        "fig3_weight_sum_max": ws.get("max"),
        "fig4_first_token_weight": mean(a.get("first_token_weight") or []),
        "fig5_head_mass_mean": mean(flat(a.get("head_mass"))),
        "fig6_entropy": mean(a.get("entropy") or []),
        "alpha_mean": mean(flat((a.get("alpha") or {}).get("mean"))),
    }


def zero_shot_agreement(a: dict, b: dict) -> tuple[float, float]:
    """(share of items whose argmax choice differs, mean |difference| of a choice's
    log-likelihood) between two per-item sample files."""
    items = changed = 0
    diffs = []
    for task, rows in a.items():
        other = {r["doc_id"]: r for r in b.get(task, [])}
        for r in rows:
            o = other.get(r["doc_id"])
            if o is None:
                continue
            la, lb = r["loglikelihoods"], o["loglikelihoods"]
            items += 1
            changed += max(range(len(la)), key=la.__getitem__) != max(range(len(lb)), key=lb.__getitem__)
            diffs += [abs(x - y) for x, y in zip(la, lb)]
    return (changed / items if items else float("nan"), mean(diffs) or 0.0)


def measure(path: Path, out: Path, args) -> list[dict]:
    """Runs every step of one run under both N; returns its rows."""
    study_row = Row(path)
    run_name, checkpoint = study_row.name, str(study_row.run)
    rows = []
    values: dict[str, dict] = {n: {} for n in NS}
    for n in NS:
        d = out / run_name / n
        d.mkdir(parents=True, exist_ok=True)
        for L in args.seq_lens:
            ev = d / f"eval_c4_{L}.json"
            run_cmd([args.kdtrain, "eval", "--checkpoint", checkpoint, "--data", args.c4, "--seq-len", str(L),
                     "--max-windows", str(args.max_windows), "--affine-n", n, "--out", str(ev)], ev)
            values[n][("c4_ppl", L)] = json.loads(ev.read_text())["perplexity"]
            an = d / f"analysis_{L}"
            run_cmd([args.kdtrain, "analyze", "--checkpoint", checkpoint, "--data", args.c4, "--seq-len", str(L),
                     "--num-seqs", str(args.num_seqs), "--affine-n", n, "--out", str(an)], an / "analysis.json")
            a = json.loads((an / "analysis.json").read_text())
            for k, v in analysis_quantities(a).items():
                values[n][(k, L)] = v
            values[n][("head_mass", L)] = flat(a.get("head_mass"))
        if args.no_zero_shot:
            continue
        hf = d / "hf"
        run_cmd([args.kdtrain, "export", "--checkpoint", checkpoint, "--out", str(hf), "--tokenizer",
                 args.tokenizer, "--affine-n", n, "--force"], hf / "config.json")
        zs = d / "zero_shot.json"
        run_cmd([sys.executable, str(HERE / "run_zero_shot.py"), "--model", str(hf), "--out", str(zs),
                 "--limit", str(args.limit), "--samples", str(d / "zero_shot_samples.json"),
                 "--dtype", "float32"], zs)
        z = json.loads(zs.read_text())
        values[n][("zero_shot_avg", "")] = z["average"]
        values[n][("zero_shot_seconds", "")] = z.get("seconds")
        values[n][("zero_shot_batch_size", "")] = z.get("batch_size")
    for (name, L), a in values["train_length"].items():
        b = values["keys"].get((name, L))
        if name == "head_mass":
            diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
            rows.append(row(run_name, "fig5_head_mass_max_cell_change", L, None, None, diff))
            continue
        rows.append(row(run_name, name, L, a, b, None if a is None or b is None else a - b))
    if not args.no_zero_shot:
        changed, dll = zero_shot_agreement(
            *(json.loads((out / run_name / n / "zero_shot_samples.json").read_text()) for n in NS))
        rows.append(row(run_name, "zero_shot_items_changed", "", None, None, changed))
        rows.append(row(run_name, "zero_shot_mean_abs_loglik_change", "", None, None, dll))
    return rows


def row(run: str, quantity: str, L, a, b, change) -> dict:
    return {"run": run, "quantity": quantity, "seq_len": L, "train_length": a, "keys": b, "change": change}


def fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of affine `sequence` students")
    ap.add_argument("--c4", required=True, help="C4 token shards (a glob, quoted)")
    ap.add_argument("--tokenizer", required=True, help="tokenizer directory for the exports")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seq-lens", nargs="+", type=int, default=[128, 64])
    ap.add_argument("--max-windows", type=int, default=256)
    ap.add_argument("--num-seqs", type=int, default=10)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--kdtrain", default=str(REPO / "build" / "kdtrain"))
    ap.add_argument("--no-zero-shot", action="store_true")
    args = ap.parse_args(argv)
    rows = [r for run in args.runs for r in measure(run, args.out, args)]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "affine_n.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("| run | quantity | seq len | N = train length | N = keys | change |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(fmt(r[k]) for k in ("run", "quantity", "seq_len", "train_length", "keys", "change"))
              + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
