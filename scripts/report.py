#!/usr/bin/env python3
"""The paper's tables and figures from kdtrain run directories.

    python3 scripts/report.py RUN_DIR... --out DIR

Each run directory may hold (docs/evaluation.md, "Run directory layout"):
    config.json              resolved config (written by `kdtrain train`)   model, variant
    metrics.jsonl            per-step metrics (written by `kdtrain train`)  loss, grad-norm curves
    info.json                `kdtrain info --config RUN/config.json --json` ΔParams (else computed)
    eval_c4.json             `kdtrain eval ... --out RUN/eval_c4.json`       C4 PPL
    zero_shot.json           scripts/run_zero_shot.py --out RUN/zero_shot.json
    analysis/analysis.json   `kdtrain analyze ... --out RUN/analysis`        Figs. 3-6, 9
Missing pieces leave empty cells or skip a figure; they are never an error.

Writes to DIR: table1.{md,csv} (baseline / sink / affine), table2.{md,csv}
(baseline / gated / affine-gated), table4.{md,csv} (grad-norm statistics over
steps 1..500), table5.{md,csv} (spike counts), figures fig*.png, and report.md
that gathers them.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

METHOD = {"baseline": "Baseline", "sink": "Sink", "affine": "Affine-Scaled", "gated": "Gated",
          "affine-gated": "Affine-Scaled + Gated"}
VARIANT_ORDER = ["baseline", "sink", "affine", "gated", "affine-gated"]
TABLE1 = ["baseline", "sink", "affine"]
TABLE2 = ["baseline", "gated", "affine-gated"]
MODEL_LABEL = {"qwen1.5-0.5b": "0.5B", "llama3.2-1b": "1B", "llama3.2-3b": "3B"}
ZERO_SHOT = [("winogrande", "Wino"), ("piqa", "PIQA"), ("hellaswag", "Hella"),
             ("arc_challenge", "ARC-c"), ("arc_easy", "ARC-e"), ("boolq", "BoolQ")]
MAIN_COLUMNS = ["Model", "Method", "ΔParams (M)", "Loss", "C4 PPL"] + [c for _, c in ZERO_SHOT] + ["Avg."]
LOGIT_KEY = "attn_logit_mean_abs"  # metrics.jsonl key of the Fig. 2 probe


# ---------------------------------------------------------------------------
# Reading a run directory
# ---------------------------------------------------------------------------

def read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows; a resumed run may repeat steps — the last record of a step wins."""
    if not path.exists():
        return []
    by_step: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e})")
            if "step" in row:
                by_step[int(row["step"])] = row
    return [by_step[s] for s in sorted(by_step)]


def delta_params_from_config(model: dict, variant: str) -> float | None:
    """ΔParams over the baseline in parameters, from the architecture (SPEC §2 table)."""
    try:
        L, C = model["num_hidden_layers"], model["hidden_size"]
        H, D = model["num_attention_heads"], model["head_dim"]
    except (KeyError, TypeError):
        return None
    extra = 0
    if variant == "sink":
        extra = L * H
    if variant in ("affine", "affine-gated"):
        extra += L * C * H          # W_alpha: d_model x H
    if variant in ("gated", "affine-gated"):
        extra += L * C * H * D      # W_g: d_model x H*D
    return float(extra)


class Run:
    def __init__(self, path: Path, kdtrain: str | None = None):
        self.path = Path(path)
        self.name = self.path.name
        self.config = read_json(self.path / "config.json") or {}
        self.metrics = read_metrics(self.path / "metrics.jsonl")
        self.eval_c4 = read_json(self.path / "eval_c4.json")
        self.zero_shot = read_json(self.path / "zero_shot.json")
        self.analysis = read_json(self.path / "analysis" / "analysis.json")
        self.info = read_json(self.path / "info.json")
        if self.info is None and kdtrain and (self.path / "config.json").exists():
            self.info = kdtrain_info(kdtrain, self.path / "config.json")
        model = self.config.get("model", {})
        attention = self.config.get("attention", {})
        self.variant = attention.get("variant") or (self.analysis or {}).get("attention") or "baseline"
        preset = model.get("preset", "")
        self.model = MODEL_LABEL.get(preset, preset or "custom")
        self.method = METHOD.get(self.variant, self.variant)

    def delta_params_m(self) -> float | None:
        if self.info and "delta_params" in self.info:
            return self.info["delta_params"] / 1e6
        d = delta_params_from_config(self.config.get("model", {}), self.variant)
        return None if d is None else d / 1e6

    def series(self, key: str) -> tuple[list[int], list[float]]:
        steps, values = [], []
        for row in self.metrics:
            v = row.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                steps.append(int(row["step"]))
                values.append(float(v))
        return steps, values

    def final_loss(self, last: int) -> float | None:
        _, losses = self.series("loss")
        if not losses:
            return None
        tail = losses[-last:]
        return sum(tail) / len(tail)

    def sort_key(self):
        order = VARIANT_ORDER.index(self.variant) if self.variant in VARIANT_ORDER else len(VARIANT_ORDER)
        return (self.model, order, self.name)


def kdtrain_info(binary: str, config: Path) -> dict | None:
    try:
        out = subprocess.run([binary, "info", "--config", str(config), "--json"], check=True,
                             capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        print(f"report: kdtrain info on {config} failed ({e}); ΔParams from the config",
              file=sys.stderr)
        return None


# ---------------------------------------------------------------------------
# Statistics (Tables 4 and 5)
# ---------------------------------------------------------------------------

def grad_norm_stats(values: list[float]) -> dict:
    """Mean, population std and variance, CV = std / mean (raw values, no smoothing)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "variance": None, "cv": None}
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / n
    std = math.sqrt(variance)
    return {"n": n, "mean": mean, "std": std, "variance": variance,
            "cv": std / mean if mean else None}


def spike_count(values: list[float], k: float) -> tuple[int, float]:
    """Steps with g > tau, tau = median(g) + k * MAD(g), MAD = median(|g - median(g)|) (unscaled)."""
    if not values:
        return 0, float("nan")
    med = statistics.median(values)
    mad = statistics.median([abs(v - med) for v in values])
    tau = med + k * mad
    return sum(1 for v in values if v > tau), tau


def early_grad_norms(run: Run, max_step: int) -> list[float]:
    steps, values = run.series("grad_norm")
    return [v for s, v in zip(steps, values) if s <= max_step]


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

def fmt(value, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:.{digits}f}"


def main_row(run: Run, loss_steps: int) -> list[str]:
    zs = (run.zero_shot or {}).get("tasks", {})
    accs = [fmt(100 * zs[t]["value"], 1) if t in zs else "" for t, _ in ZERO_SHOT]
    avg = run.zero_shot.get("average") if run.zero_shot else None
    ppl = run.eval_c4.get("perplexity") if run.eval_c4 else None
    return ([run.model, run.method, fmt(run.delta_params_m(), 1), fmt(run.final_loss(loss_steps), 2),
             fmt(ppl, 1)] + accs + [fmt(100 * avg if avg is not None else None, 1)])


def write_table(out: Path, stem: str, title: str, header: list[str], rows: list[list[str]]) -> str:
    with open(out / f"{stem}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    md = "\n".join(lines) + "\n"
    (out / f"{stem}.md").write_text(md, encoding="utf-8")
    return md


def tables(runs: list[Run], out: Path, loss_steps: int, early_steps: int) -> list[str]:
    parts = []
    for stem, variants, title in (("table1", TABLE1, "Table 1: baseline, attention sink, Affine-Scaled"),
                                  ("table2", TABLE2, "Table 2: baseline, Gated, Affine-Scaled + Gated")):
        rows = [main_row(r, loss_steps) for r in runs if r.variant in variants]
        parts.append(write_table(out, stem, title, MAIN_COLUMNS, rows))
    rows4, rows5 = [], []
    for r in runs:
        g = early_grad_norms(r, early_steps)
        s = grad_norm_stats(g)
        rows4.append([r.model, r.method, str(s["n"]), fmt(s["mean"], 3), fmt(s["std"], 3),
                      fmt(s["variance"], 3), fmt(s["cv"], 2)])
        c6, t6 = spike_count(g, 6)
        c9, t9 = spike_count(g, 9)
        rows5.append([r.model, r.method, str(len(g)), str(c6), str(c9), fmt(t6, 3), fmt(t9, 3)])
    parts.append(write_table(out, "table4", f"Table 4: gradient-norm statistics, steps 1-{early_steps}",
                             ["Model", "Method", "Steps", "Mean", "Std", "Variance", "CV"], rows4))
    parts.append(write_table(out, "table5", f"Table 5: gradient-norm spikes, steps 1-{early_steps}",
                             ["Model", "Method", "Steps", "#Spikes (k=6)", "#Spikes (k=9)",
                              "tau (k=6)", "tau (k=9)"], rows5))
    return parts


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def figures(runs: list[Run], out: Path, late_fraction: float) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        made.append(name)

    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.model, []).append(r)

    def curves(key, fname, title, ylabel, start_fraction=0.0, log=False):
        for model, rs in groups.items():
            fig, ax = plt.subplots(figsize=(6, 4))
            drawn = False
            for r in rs:
                steps, values = r.series(key)
                if not steps:
                    continue
                first = start_fraction * steps[-1]
                pts = [(s, v) for s, v in zip(steps, values) if s >= first]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{r.method} ({r.name})", lw=1)
                drawn = True
            if not drawn:
                plt.close(fig)
                continue
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{title} — {model}")
            ax.legend(fontsize=7)
            save(fig, f"{fname}_{safe(model)}.png")

    curves(LOGIT_KEY, "fig2_logit_magnitude", "Mean |QK^T/sqrt(d)|", "mean |logit|")
    curves("loss", "fig7_loss", "Training loss", "loss")
    curves("grad_norm", "fig8_grad_norm", "Gradient norm", "grad norm", log=True)
    kd_key = "kd" if any(any(row.get("kd") for row in r.metrics) for r in runs) else "loss"
    curves(kd_key, "fig10_loss_late", f"{kd_key.upper()} loss, late phase", kd_key,
           start_fraction=1.0 - late_fraction)

    analysed = [r for r in runs if r.analysis]
    for model, rs in groups.items():
        ra = [r for r in rs if r.analysis]
        for key, fname, ylabel in (("first_token_weight", "fig4_first_token", "first-token weight"),
                                   ("entropy", "fig6_entropy", "attention entropy (nats)")):
            if not ra:
                continue
            fig, ax = plt.subplots(figsize=(6, 4))
            for r in ra:
                y = r.analysis[key]
                ax.plot(range(1, len(y) + 1), y, marker="o", ms=3, label=r.method)
            ax.set_xlabel("layer")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ylabel} per layer — {model}")
            ax.legend(fontsize=7)
            save(fig, f"{fname}_{safe(model)}.png")
    for r in analysed:
        a = r.analysis
        tag = safe(f"{r.model}_{r.name}")
        q = a["query_mass"]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        edges, counts = q["edges"], q["counts"]
        ax.bar(edges[:-1], counts, width=[edges[i + 1] - edges[i] for i in range(len(counts))],
               align="edge", color="tab:blue", alpha=0.8)
        ax.axvline(q["mean"], ls="--", color="k", lw=1, label=f"mean {q['mean']:.3f}")
        ax.axvline(q["median"], ls="--", color="tab:red", lw=1, label=f"median {q['median']:.3f}")
        ax.set_xlabel("per-query attention mass on tokens (mean over heads)")
        ax.set_ylabel("queries")
        ax.set_title(f"{r.method} — {r.model}")
        ax.legend(fontsize=7)
        save(fig, f"fig3_query_mass_{tag}.png")

        fig, ax = plt.subplots(figsize=(6, 4))
        im = ax.imshow(a["head_mass"], aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"Total attention per head — {r.method}, {r.model}")
        fig.colorbar(im, ax=ax)
        save(fig, f"fig5_head_heatmap_{tag}.png")

        m = a["attention_map"]
        fig, ax = plt.subplots(figsize=(5, 4.5))
        im = ax.imshow(m["weights"], cmap="viridis")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(f"Layer {m['layer']} attention, mean over heads — {r.method}")
        fig.colorbar(im, ax=ax)
        save(fig, f"fig9_attention_map_{tag}.png")
    return made


# ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.add_argument("--out", required=True, type=Path, help="report directory")
    p.add_argument("--loss-steps", type=int, default=20,
                   help="final training loss = mean of the last N logged steps (default 20)")
    p.add_argument("--early-steps", type=int, default=500,
                   help="Tables 4 and 5 use steps 1..N (default 500)")
    p.add_argument("--late-fraction", type=float, default=2 / 9,
                   help="Fig. 10 shows the last fraction of steps (default 2/9: 7k-9k of 9k)")
    p.add_argument("--kdtrain", default=None,
                   help="kdtrain binary for ΔParams via `kdtrain info --json` (default: from config)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    a = p.parse_args(argv)
    for r in a.runs:
        if not r.is_dir():
            p.error(f"{r}: not a directory")
    runs = sorted((Run(r, a.kdtrain) for r in a.runs), key=Run.sort_key)
    a.out.mkdir(parents=True, exist_ok=True)
    parts = tables(runs, a.out, a.loss_steps, a.early_steps)
    made: list[str] = []
    if not a.no_figures:
        try:
            made = figures(runs, a.out, a.late_fraction)
        except ImportError:
            print("report: matplotlib is not installed (pip install -r requirements-eval.txt); "
                  "figures skipped", file=sys.stderr)
    doc = ["# kdtrain report", "", "Runs: " + ", ".join(f"`{r.path}`" for r in runs), ""]
    doc += parts
    doc += ["### Figures", ""] + [f"![{m}]({m})" for m in made]
    (a.out / "report.md").write_text("\n".join(doc) + "\n", encoding="utf-8")
    print(f"report: {len(runs)} runs -> {a.out} ({len(made)} figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
