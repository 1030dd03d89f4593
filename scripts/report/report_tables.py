"""The paper's Tables 1-5 from runs (scripts/report/report.py; docs/evaluation.md, "Report").

Every table is written as Markdown (title, table, notes) and CSV (header + rows).
The notes under a table say what each column measured for these runs: the loss
quantity, the C4 windows and tokenizers, the zero-shot splits and example counts,
the step range; rows whose zero-shot used --limit carry LIMIT_MARK.
"""
from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from report_runs import ALPHA_LABEL, PAPER_ALPHA, SOFT_CE_KEY, Run

ZERO_SHOT = [("winogrande", "Wino"), ("piqa", "PIQA"), ("hellaswag", "Hella"),
             ("arc_challenge", "ARC-c"), ("arc_easy", "ARC-e"), ("boolq", "BoolQ")]
MAIN_COLUMNS = (["Model", "Method", "Run", "ΔParams (M)", "Loss", "C4 PPL", "C4 BPB", "C4 word PPL"]
                + [c for _, c in ZERO_SHOT] + ["Avg."])
LIMIT_MARK = "‡"
OFF_SCALE_MARK = "†"
TABLE1 = ("baseline", "sink", "affine")
TABLE2 = ("baseline", "gated", "affine-gated")


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


def early_grad_norms(run: Run, max_step: int) -> tuple[list[int], list[float]]:
    steps, values = run.series("grad_norm")
    kept = [(s, v) for s, v in zip(steps, values) if s <= max_step]
    return [s for s, _ in kept], [v for _, v in kept]


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------

def fmt(value, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return f"{value:.{digits}f}"


def fmt_stat(value: float | None) -> str:
    """The paper's three decimals (Tables 4/5), with two significant digits below
    0.01 so that the small grad norms of tiny models do not all print as 0.000."""
    if value is None or not math.isfinite(value):
        return ""
    if value == 0 or abs(value) >= 0.01:
        return f"{value:.3f}"
    return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}"


def fmt_delta_params(millions: float | None) -> str:
    """The paper's one decimal, with two significant digits below 0.1 M (tiny models)."""
    if millions is None:
        return ""
    if millions == 0 or millions >= 0.1:
        return f"{millions:.1f}"
    return f"{millions:.{1 - math.floor(math.log10(millions))}f}"


def method_cell(run: Run, with_alpha: bool = False) -> str:
    return run.method(with_alpha) + (f" {LIMIT_MARK}" if run.limit else "")


def main_row(run: Run, loss_steps: int, with_alpha: bool = False) -> list[str]:
    zs = (run.zero_shot or {}).get("tasks", {})
    accs = [fmt(100 * zs[t]["value"], 1) if t in zs else "" for t, _ in ZERO_SHOT]
    avg = run.zero_shot.get("average") if run.zero_shot else None
    c4 = run.eval_c4 or {}
    loss = fmt(run.final_loss(loss_steps), 2)
    if loss and not run.loss_on_paper_scale():
        loss += f" {OFF_SCALE_MARK}"
    return ([run.model, method_cell(run, with_alpha), run.name, fmt_delta_params(run.delta_params_m()),
             loss, fmt(c4.get("perplexity"), 1), fmt(c4.get("bits_per_byte"), 3),
             fmt(c4.get("word_perplexity"), 1)]
            + accs + [fmt(100 * avg if avg is not None else None, 1)])


# ---------------------------------------------------------------------------
# Notes: what the columns measured for these runs
# ---------------------------------------------------------------------------

def loss_note(runs: list[Run], loss_steps: int) -> str:
    note = (f"Loss: mean of the last {loss_steps} logged training steps (all, if fewer) of the teacher soft "
            f"cross-entropy `{SOFT_CE_KEY}` = KL(p_T‖p_S) + H(p_T) in nats per token (the paper's "
            "cross-entropy scale; the optimised forward KL is this minus the teacher's entropy); "
            "for a run without a teacher, its CE.")
    if any(not r.loss_on_paper_scale() for r in runs):
        note += (f" {OFF_SCALE_MARK} the run logged no `{SOFT_CE_KEY}` (it predates it): the "
                 "number is its optimised KD loss (forward KL), not on the paper's scale.")
    return note


def c4_note(runs: list[Run]) -> str:
    described = {}
    for r in runs:
        e = r.eval_c4
        if not e:
            continue
        m = e.get("data_manifest", {})
        source = ", ".join(Path(p).name for p in m.get("inputs") or e.get("data") or []) or "?"
        tokenizer = (Path(m["tokenizer"]["path"]).name + " tokenizer" if "tokenizer" in m
                     else "tokenizer not recorded")
        available = e.get("windows_available")
        which = ("every window" if available in (None, e.get("windows")) else
                 f"the first {e.get('windows', 0):,} of {available:,} windows")
        text = (f"{which} of {e.get('seq_len')} tokens (stride {e.get('seq_len')}, "
                f"{e.get('tokens', 0):,} scored tokens) of {source}"
                + (f" ({m['documents']:,} documents)" if "documents" in m else "")
                + f", {tokenizer}")
        described.setdefault(text, []).append(r.name)
    if not described:
        return ""
    parts = [f"{text} [{', '.join(names)}]" if len(described) > 1 else text
             for text, names in described.items()]
    return ("C4 PPL: token-level perplexity exp(mean CE) over " + "; ".join(parts) + ". "
            "C4 BPB: bits per byte of the same text (CE / ln 2 over the UTF-8 bytes of the "
            "scored tokens), comparable across tokenizers. C4 word PPL: lm-eval's word perplexity "
            "exp(CE sum / words), words counted as lm-eval does (whitespace-separated, from the "
            "documents' words per byte); blank where the shards' manifest predates the word count. "
            "The paper does not define its C4 perplexity; lm-eval's word perplexity may be what its "
            "column is (docs/evaluation.md).")


def zero_shot_note(runs: list[Run]) -> str:
    described = {}
    for r in runs:
        tasks = (r.zero_shot or {}).get("tasks", {})
        if not tasks:
            continue
        if not any("split" in t for t in tasks.values()):
            described.setdefault("splits not recorded (zero_shot.json predates them)", []).append(r.name)
            continue
        cells = []
        for key, column in ZERO_SHOT:
            t = tasks.get(key, {})
            if "split" not in t:
                cells.append(f"{column} (split not recorded)")
                continue
            official = "" if t.get("official_split", True) else ", not lm-eval's split"
            cells.append(f"{column} {t['split']} {t['examples']:,}/{t['split_size']:,}{official}")
        described.setdefault("; ".join(cells), []).append(r.name)
    if not described:
        return ""
    parts = [f"{text} [{', '.join(names)}]" if len(described) > 1 else text
             for text, names in described.items()]
    note = ("Zero-shot (lm-eval 0.4.9, acc; acc_norm for Hella and ARC-c), examples scored / "
            "split size: " + " | ".join(parts) + ".")
    limits = sorted({r.limit for r in runs if r.limit})
    if limits:
        note += (f" {LIMIT_MARK} zero-shot on the first {', '.join(map(str, limits))} items of "
                 "each task (--limit): not comparable with full-split scores.")
    return note


def limit_note(runs: list[Run]) -> str:
    limits = sorted({r.limit for r in runs if r.limit})
    if not limits:
        return ""
    return (f"{LIMIT_MARK} the run's zero-shot evaluation used --limit "
            f"{', '.join(map(str, limits))} (first items of each task only).")


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------

def write_table(out: Path, stem: str, title: str, header: list[str], rows: list[list[str]],
                notes: list[str]) -> str:
    with open(out / f"{stem}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if not rows:
        lines += ["", "(no run of this table)"]
    lines += [""] + [f"- {n}" for n in notes if n]
    md = "\n".join(lines) + "\n"
    (out / f"{stem}.md").write_text(md, encoding="utf-8")
    return md


def step_range(used: list[int], early_steps: int) -> str:
    """'1–N' for the steps Tables 4/5 used, from the runs' own last steps."""
    ends = sorted(set(used))
    if not ends:
        return f"1–{early_steps} (no steps logged)"
    return f"1–{ends[0]}" if len(ends) == 1 else f"1–{ends[0]} … 1–{ends[-1]} (column Steps)"


def with_own_methods(rows: list[Run]) -> list[Run]:
    """The rows of the model sizes that have one of the table's own methods beside
    the baseline (a 0.5B baseline alone is not a Table 2 row); all rows when none has."""
    sizes = {r.model for r in rows if r.variant != "baseline"}
    return [r for r in rows if r.model in sizes] if sizes else rows


EXTRA_MARK = "(extra)"
TABLE3_NOTE = ("The paper's Table 3 compares the α activations on 1B Affine-Scaled + Gated: its "
               "linear-clip row (58.0) is Table 2's 1B Affine-Scaled + Gated average, not Table 1's "
               "1B Affine-Scaled (57.2). Its rows here are the affine-gated runs of every size with "
               "both activations.")


def alpha_pairs(runs: list[Run], variant: str) -> list[Run]:
    """The runs of `variant` at the (size, affine divisor) pairs where it was run with two
    α activations: a run under another divisor (1B-affine-visible) compares no activation."""
    rs = [r for r in runs if r.variant == variant]

    def key(r: Run):
        return r.model, r.divisor

    pairs = {key(r) for r in rs if any(key(o) == key(r) and o.alpha != r.alpha for o in rs)}
    return [r for r in rs if key(r) in pairs]


def table3_runs(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """Table 3's rows as the paper runs it (affine-gated, both activations; every
    affine-gated run when no size has both) and its extra rows: plain-affine pairs."""
    main = alpha_pairs(runs, "affine-gated") or [r for r in runs if r.variant == "affine-gated"]
    return main, alpha_pairs(runs, "affine")


def extra_note(extra: list[Run]) -> str:
    if not extra:
        return ""
    return (f"{EXTRA_MARK} rows: the same comparison on plain Affine-Scaled (no gate), kdtrain's "
            "extra, not a row of the paper's table.")


def tables(runs: list[Run], out: Path, loss_steps: int, early_steps: int) -> list[tuple[str, str]]:
    """Writes table1..table5 (.md, .csv); returns [(stem, markdown)]."""
    parts = []
    paper_alpha = [r for r in runs if r.alpha in (None, PAPER_ALPHA)]
    for stem, variants, title in (
            ("table1", TABLE1, "Table 1: baseline, attention sink, Affine-Scaled"),
            ("table2", TABLE2, "Table 2: baseline, Gated, Affine-Scaled + Gated")):
        chosen = with_own_methods([r for r in paper_alpha if r.variant in variants])
        parts.append((stem, write_table(out, stem, title, MAIN_COLUMNS,
                                        [main_row(r, loss_steps) for r in chosen],
                                        [loss_note(chosen, loss_steps), c4_note(chosen),
                                         zero_shot_note(chosen)])))
    main, extra = table3_runs(runs)
    shown = main + extra
    activations = ", ".join(sorted({ALPHA_LABEL.get(r.alpha, r.alpha) for r in shown})) or "none"
    rows3 = [main_row(r, loss_steps, with_alpha=True) for r in main]
    rows3 += [[f"{r.model} {EXTRA_MARK}"] + main_row(r, loss_steps, with_alpha=True)[1:] for r in extra]
    parts.append(("table3", write_table(
        out, "table3", f"Table 3: α activation of Affine-Scaled + Gated ({activations}); "
                       "Avg. is the paper's CSR Avg.",
        MAIN_COLUMNS, rows3,
        [TABLE3_NOTE, extra_note(extra), loss_note(shown, loss_steps), c4_note(shown),
         zero_shot_note(shown)])))

    rows4, rows5, used = [], [], []
    for r in runs:
        steps, g = early_grad_norms(r, early_steps)
        if steps:
            used.append(steps[-1])
        s = grad_norm_stats(g)
        head = [r.model, method_cell(r), r.name]
        rows4.append(head + [str(s["n"]), fmt_stat(s["mean"]), fmt_stat(s["std"]),
                             fmt_stat(s["variance"]), fmt(s["cv"], 2)])
        c6, t6 = spike_count(g, 6)
        c9, t9 = spike_count(g, 9)
        rows5.append(head + [str(len(g)), str(c6), str(c9), fmt_stat(t6), fmt_stat(t9)])
    span = step_range(used, early_steps)
    basis = (f"Steps {span} of each run (the paper's 0–500; `step` in metrics.jsonl is 1-based, "
             f"at most --early-steps {early_steps}), raw grad_norm values, no smoothing.")
    parts.append(("table4", write_table(out, "table4", f"Table 4: gradient-norm statistics, steps {span}",
                             ["Model", "Method", "Run", "Steps", "Mean", "Std", "Variance", "CV"],
                             rows4, [basis + " Std and variance are population (ddof 0); "
                                     "CV = std / mean.", limit_note(runs)])))
    parts.append(("table5", write_table(out, "table5", f"Table 5: gradient-norm spikes, steps {span}",
                             ["Model", "Method", "Run", "Steps", "#Spikes (k=6)", "#Spikes (k=9)",
                              "tau (k=6)", "tau (k=9)"],
                             rows5, [basis + " A spike is a step with g > tau = median(g) + "
                                     "k·MAD(g), MAD unscaled.", limit_note(runs)])))
    return parts
