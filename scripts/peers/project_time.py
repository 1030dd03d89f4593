#!/usr/bin/env python3
"""GPU hours of the paper's study, projected from a measured MFU.

    python3 scripts/peers/project_time.py --mfu 0.306 [--gpus 8] [--plan configs/paper/study.json]
    python3 scripts/peers/project_time.py --bench docs/gpu/latest.json ...   # MFU per variant from kdtrain bench JSON

For every run of the study plan: FLOPs per trained token with the one convention
all of kdtrain's tools use (docs/performance.md, "FLOP formula"):

    student 6·N + 12·L·H·D·T  +  teacher forward 2·N_t + 4·L_t·H_t·D_t·T

(N: trainable parameters except the input embedding, plus the LM head once; full
T×T attention, no causal halving), times the tokens of the run (train.steps ×
global_batch × seq_len of its config), divided by MFU × peak × GPUs. The MFU is
what was measured (a `kdtrain bench --json` file gives one per variant; its
`mfu` counts the same FLOPs); it is applied to every model size and to runs with a
teacher as measured, and the GPUs are assumed to scale linearly — both are
assumptions the output repeats.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pytorch import (FLOP_FORMULA, PRESETS, student_train_flops_per_token,  # noqa: E402
                           teacher_forward_flops_per_token)

REPO = Path(__file__).resolve().parents[2]


def run_tokens(config: dict) -> int:
    t = config["train"]
    return t["steps"] * t["global_batch"] * t["seq_len"]


def projection(plan: dict, mfu: dict[str, float], peak_tflops: float, gpus: int) -> list[dict]:
    rows = []
    for run in plan["runs"]:
        size = plan["sizes"][run["size"]]
        config = json.loads((REPO / size["config"]).read_text())
        student, teacher = PRESETS[config["model"]["preset"]], PRESETS[size["teacher_preset"]]
        T = config["train"]["seq_len"]
        variant = run["attention"]
        flops = (student_train_flops_per_token(student, variant, T)
                 + teacher_forward_flops_per_token(teacher, T))
        tokens = run_tokens(config)
        rate = mfu.get(variant, mfu.get("*"))
        hours = flops * tokens / (rate * peak_tflops * 1e12) / 3600 if rate else None
        rows.append({"run": run.get("name", f"{run['size']}-{variant}"), "size": run["size"],
                     "variant": variant, "teacher": size["teacher_preset"], "tokens": tokens,
                     "gflop_per_token": flops / 1e9, "total_flop": flops * tokens, "mfu": rate,
                     "gpu_hours": hours, "hours_on_gpus": hours / gpus if hours else None})
    return rows


def mfu_from_bench(paths: list[Path]) -> dict[str, float]:
    """MFU per variant from `kdtrain bench --json` outputs (one object, a list, or
    {"runs": [...]}) or from docs/gpu/latest.json (scripts/gpu/gpu_report.py), where the
    measurement with a teacher is taken when there is one: the study runs with one."""
    out = {}
    for p in paths:
        doc = json.loads(p.read_text())
        if isinstance(doc, dict) and ("mfu_1b_t2048" in doc or "mfu_1b_t2048_with_teacher" in doc):
            for key in ("mfu_1b_t2048", "mfu_1b_t2048_with_teacher"):  # the second wins
                out.update({v: float(m) for v, m in (doc.get(key) or {}).items() if m})
            continue
        for r in doc if isinstance(doc, list) else doc.get("runs", [doc]):
            if r.get("mfu"):
                out[r.get("attention", "*")] = float(r["mfu"])
    if not out:
        raise SystemExit(f"--bench {' '.join(map(str, paths))}: no measured MFU in these files")
    return out


def parse_mfu(text: str) -> dict[str, float]:
    """'0.31' (every variant) or 'baseline=0.318,affine=0.306,...'."""
    if "=" not in text:
        return {"*": float(text)}
    return {k: float(v) for k, v in (item.split("=", 1) for item in text.split(","))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", type=Path, default=REPO / "configs" / "paper" / "study.json")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mfu", type=parse_mfu, help="measured MFU: 0.31 or variant=mfu,...")
    src.add_argument("--bench", type=Path, nargs="+", help="kdtrain bench --json outputs")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM 989)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of one run, linear scaling assumed")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    mfu = a.mfu if a.mfu else mfu_from_bench(a.bench)
    rows = projection(json.loads(a.plan.read_text()), mfu, a.peak_tflops, a.gpus)
    if a.json:
        print(json.dumps({"flop_formula": FLOP_FORMULA, "peak_tflops": a.peak_tflops,
                          "gpus": a.gpus, "rows": rows}, indent=2))
        return 0
    print(f"| run | teacher | GFLOP/token | tokens | MFU | GPU-hours | hours on {a.gpus} GPUs |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        h = f"{r['gpu_hours']:,.0f}" if r["gpu_hours"] else "n/a"
        hn = f"{r['hours_on_gpus']:,.1f}" if r["hours_on_gpus"] else "n/a"
        m = f"{100 * r['mfu']:.1f}%" if r["mfu"] else "not measured"
        print(f"| {r['run']} | {r['teacher']} | {r['gflop_per_token']:.2f} | {r['tokens'] / 1e9:.2f}B "
              f"| {m} | {h} | {hn} |")
    total = sum(r["gpu_hours"] or 0 for r in rows)
    print(f"\nTotal: {total:,.0f} GPU-hours ({total / a.gpus:,.0f} h on {a.gpus} GPUs). "
          f"FLOPs: {FLOP_FORMULA}; peak {a.peak_tflops} TFLOP/s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
