#!/usr/bin/env python3
"""One CSV row per run of a study, with the numbers a results README quotes that the
report's tables do not carry: the late training and final validation losses, the
C4 numbers at full precision, the zero-shot average and the attention analysis (first-token weight,
entropy, each query's total weight on the tokens, α and α_ma).

    scripts/report/study_summary.py ROW... --out summary.csv

The rows (scripts/report/study_layout.py) are read as scripts/report/report.py reads them
(report_runs.Run); a number a run does not have is left blank.
"""
import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_runs import Run  # noqa: E402
from study_layout import Row  # noqa: E402

LAST = 20  # the late window of the training losses, as the report's Loss column


def mean(values):
    values = [v for v in values or [] if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def last(run: Run, key: str):
    """The last logged value of key (validation metrics are logged at their interval and at the end)."""
    _, values = run.series(key)
    return values[-1] if values else None


def flat(x):
    """The numbers of a per-layer (or per-layer, per-head) list, flattened."""
    if isinstance(x, list):
        return [v for item in x for v in flat(item)]
    return [x] if isinstance(x, (int, float)) else []


def summary_row(run: Run) -> dict:
    c4 = run.eval_c4 or {}
    analysis = run.analysis or {}
    alpha = analysis.get("alpha") or {}
    weight_sum = analysis.get("query_weight_sum") or {}
    steps, _ = run.series("loss")
    return {
        "run": run.name,
        "method": run.method(),
        "divisor": run.divisor or "",
        "params": (run.info or {}).get("total_params"),
        "delta_params": (run.info or {}).get("delta_params"),
        "steps": steps[-1] if steps else None,
        f"kd_last{LAST}": run.final("kd", LAST),
        f"soft_ce_last{LAST}": run.final("soft_ce", LAST),
        f"ce_last{LAST}": run.final("ce", LAST),
        "val_kd": last(run, "val_kd"),  # the held-out FineWeb-Edu shard, after the last step
        "val_soft_ce": last(run, "val_soft_ce"),
        "c4_mean_ce": c4.get("mean_ce"),
        "c4_ppl": c4.get("perplexity"),
        "c4_bits_per_byte": c4.get("bits_per_byte"),
        "c4_word_ppl": c4.get("word_perplexity"),
        "zero_shot_avg": (run.zero_shot or {}).get("average"),
        "zero_shot_limit": run.limit,
        "first_token_w": mean(analysis.get("first_token_weight")),
        "entropy": mean(analysis.get("entropy")),
        "weight_sum_mean": weight_sum.get("mean"),
        "weight_sum_min": weight_sum.get("min"),
        "weight_sum_median": weight_sum.get("median"),
        "weight_sum_max": weight_sum.get("max"),
        "alpha_mean": mean(flat(alpha.get("mean"))),
        "alpha_ma_mean": mean(flat(alpha.get("alpha_ma"))),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="study rows (ROW holding run/) or run directories")
    ap.add_argument("--out", type=Path, required=True, help="the CSV to write")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.runs if not (Row(r).run / "config.json").is_file()]
    if missing:
        raise SystemExit(f"study_summary: not a run directory (no config.json): {', '.join(missing)}")
    rows = [summary_row(run) for run in sorted((Run(r) for r in args.runs), key=Run.sort_key)]
    tmp = args.out.with_name(args.out.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v))
                        for k, v in row.items()})
    tmp.replace(args.out)
    print(f"study_summary: {len(rows)} runs -> {args.out}")


if __name__ == "__main__":
    main()
