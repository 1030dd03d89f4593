"""The paper's Figures 2-11 from runs (scripts/report/report.py; docs/evaluation.md, "Report").

Each function draws one figure kind and returns [(file name, caption)]. Curves and
per-layer lines are drawn per model size (one line per run); Fig. 3 is one grid per
model size (a row per analysed run: the paper's quantity, kdtrain's all-but-the-first
view, the softmax part); Figs. 5 and 9 are one file per analysed run; Fig. 11 (the two
α activations) needs no run.
"""
from __future__ import annotations

from pathlib import Path

from report_runs import LOGIT_ALL_KEY, LOGIT_KEY, Run


def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def by_model(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.model, []).append(r)
    return groups


def figures(runs: list[Run], out: Path, late_fraction: float) -> list[tuple[str, str]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[tuple[str, str]] = []

    def save(fig, name, caption):
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        made.append((name, caption))

    groups = by_model(runs)

    def curves(key_of, fname, title, ylabel, caption, start_fraction=0.0, log=False):
        for model, rs in groups.items():
            fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
            drawn = False
            for r in rs:
                steps, values = r.series(key_of(r))
                if not steps:
                    continue
                first = start_fraction * steps[-1]
                pts = [(s, v) for s, v in zip(steps, values) if s >= first]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1,
                        label=f"{r.method()} ({r.name})")
                drawn = True
            if not drawn:
                plt.close(fig)
                continue
            if log:
                ax.set_yscale("log")
            integer_ticks(ax)  # steps: no 5.2, 5.4 ... on a short run's late phase
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel(rs) if callable(ylabel) else ylabel)
            ax.set_title(f"{title} — {model}")
            ax.legend(fontsize=7)
            save(fig, f"{fname}_{safe(model)}.png", f"{caption} ({model})")

    def logit_key(r: Run) -> str:
        """Fig. 2's quantity where the run logged it, else the older per-step prefix probe."""
        return LOGIT_ALL_KEY if r.series(LOGIT_ALL_KEY)[0] else LOGIT_KEY

    every = all(logit_key(r) == LOGIT_ALL_KEY for r in runs if r.metrics)
    curves(logit_key, "fig2_logit_magnitude", "Mean |QKᵀ/√d|", "mean |logit|",
           "Fig. 2: mean |q·k/√d| over layers, heads and causal pairs, "
           + ("every position of every sequence of the step's last micro-batch, every "
              "log.logit_mean_interval steps and at the validation steps"
              if every else "every position of the last micro-batch at the steps where the run logged "
              "it (attn_logit_mean_abs_all), else the first 128 positions of one sequence per step "
              "(older runs)"))
    curves(Run.loss_key, "fig7_loss", "Training loss", loss_label,
           "Fig. 7: training loss per step — teacher soft cross-entropy (KL + teacher entropy) "
           "for distilled runs")
    curves(lambda r: "grad_norm", "fig8_grad_norm", "Gradient norm", "grad norm (log)",
           "Fig. 8: global gradient norm before clipping", log=True)
    curves(Run.loss_key, "fig10_loss_late", "Training loss, late phase", loss_label,
           f"Fig. 10: the loss of Fig. 7 over the last {late_fraction:.0%} of steps",
           start_fraction=1.0 - late_fraction)

    for model, rs in groups.items():
        ra = [r for r in rs if r.analysis]
        for key, fname, ylabel, caption in (
                ("first_token_weight", "fig4_first_token", "first-token weight",
                 "Fig. 4: mean effective weight on token 0 per layer"),
                ("entropy", "fig6_entropy", "attention entropy (nats)",
                 "Fig. 6: mean attention entropy per layer")):
            if not ra:
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
            for r in ra:
                y = r.analysis[key]
                ax.plot(range(1, len(y) + 1), y, marker="o", ms=3, label=f"{r.method()} ({r.name})")
            integer_ticks(ax)
            ax.set_xlabel("layer")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ylabel} per layer — {model}")
            ax.legend(fontsize=7)
            save(fig, f"{fname}_{safe(model)}.png", f"{caption} ({model})")
        if ra:
            query_mass_grid(plt, ra, model, out, save)

    for r in runs:
        if r.analysis:
            head_heatmap(plt, r, save)
            attention_map(plt, r, save)
    activation_curves(plt, save)
    return made


def activation_curves(plt, save) -> None:
    """Fig. 11: the α activations over their input z = x W_α, as docs/model.md defines
    them: sigmoid(z) and linear clip, 0.1 z + 0.5 clamped to [0, 1]."""
    import math
    zs = [k / 20 for k in range(-200, 201)]
    fig, ax = plt.subplots(figsize=(5.2, 3.6), layout="constrained")
    ax.plot(zs, [1.0 / (1.0 + math.exp(-z)) for z in zs], label="sigmoid")
    ax.plot(zs, [min(1.0, max(0.0, 0.1 * z + 0.5)) for z in zs], label="linear clip")
    ax.axhline(0.5, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("z = x W_α")
    ax.set_ylabel("α = φ(z)")
    ax.set_title("α activations")
    ax.legend(fontsize=8)
    save(fig, "fig11_alpha_activations.png",
         "Fig. 11: the α activations, sigmoid and linear clip (attention.alpha_activation); "
         "linear clip's slope is 0.1 on (−5, 5) and 0 outside, sigmoid's at most 0.25 and vanishing "
         "towards both ends")


def loss_label(runs: list[Run]) -> str:
    keys = {r.loss_key() for r in runs if r.metrics}
    if keys == {"soft_ce"}:
        return "teacher soft CE = KL + H(teacher) (nats/token)"
    return "logged loss, nats/token (KD where no soft_ce)"


def histogram_panel(ax, q: dict, xlabel: str) -> None:
    edges, counts = q["edges"], q["counts"]
    total = max(1, sum(counts))
    ax.bar(edges[:-1], [c / total for c in counts],
           width=[edges[i + 1] - edges[i] for i in range(len(counts))],
           align="edge", color="tab:blue", alpha=0.8)
    ax.axvline(q["mean"], ls="--", color="k", lw=1, label=f"mean {q['mean']:.3f}")
    ax.axvline(q["median"], ls="--", color="tab:red", lw=1, label=f"median {q['median']:.3f}")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("share of queries", fontsize=8)
    ax.legend(fontsize=7)


# Fig. 3's panels: analysis.json key, x label, title suffix (docs/analysis.md defines each).
FIG3_PANELS = (
    ("query_weight_sum", "Σ_j w_ij over every token: 1, 1 − S_i, α_i + (i+1)β_i",
     "the paper's quantity"),
    ("query_mass_excl_first", "Σ_{j≥1} w_ij, every token but the first", "kdtrain's own view"),
    ("query_mass", "softmax-part mass (1, 1 − S_i or α_i)", "softmax part"),
)


def query_mass_grid(plt, runs: list[Run], model: str, out: Path, save) -> None:
    """Fig. 3: per run, the paper's per-query weight sum over every token, kdtrain's
    all-but-the-first-token view and the softmax-part mass, each a mean over heads."""
    fig, axes = plt.subplots(len(runs), len(FIG3_PANELS), figsize=(14, 2.6 * len(runs) + 0.6),
                             squeeze=False, layout="constrained")
    for row, r in zip(axes, runs):
        for ax, (key, xlabel, what) in zip(row, FIG3_PANELS):
            if key in r.analysis:
                histogram_panel(ax, r.analysis[key], f"{xlabel}, per query, mean over heads")
            else:
                ax.text(0.5, 0.5, "not in this analysis.json\n(it predates the quantity:\n"
                        "rerun kdtrain analyze)", ha="center", va="center", fontsize=9,
                        transform=ax.transAxes)
                ax.set_axis_off()
            ax.set_title(f"{r.method()} ({r.name}): {what}", fontsize=8)
    fig.suptitle(f"Per-query attention weight sums — {model}", fontsize=10)
    save(fig, f"fig3_query_mass_{safe(model)}.png",
         f"Fig. 3: per-query sum of the effective attention weights, mean over heads — left, the "
         f"paper's quantity (every token: 1 for baseline, 1 − sink mass for sink, "
         f"α_i + (i+1)β_i for affine); middle, kdtrain's own view (every token but the first); "
         f"right, the softmax part's mass ({model})")


def integer_ticks(ax, y: bool = False) -> None:
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if y:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def image_figure(plt, data, xlabel: str, ylabel: str, title: str, figsize, **imshow):
    """One heat map with integer ticks and a colour bar beside (not over) its title."""
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    im = ax.imshow(data, cmap="viridis", **imshow)
    integer_ticks(ax, y=True)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.85)
    return fig


def head_heatmap(plt, r: Run, save) -> None:
    mass = r.analysis["head_mass"]
    L, H = len(mass), len(mass[0])
    # cells centred on layer 1..L and head 1..H, as Figs. 4 and 6 number layers
    fig = image_figure(plt, mass, "head", "layer",
                       f"Mass on tokens per head\n{r.method()} ({r.name}), {r.model}", (6.4, 4.2),
                       aspect="auto", vmin=0.0, vmax=1.0, extent=(0.5, H + 0.5, L + 0.5, 0.5))
    save(fig, f"fig5_head_heatmap_{safe(r.model)}_{safe(r.name)}.png",
         f"Fig. 5: mean mass on tokens per layer and head, fixed [0, 1] scale ({r.name})")


def attention_map(plt, r: Run, save) -> None:
    """Fig. 9; for the sink variant the sink's share is column 0, as the paper draws it."""
    m = r.analysis["attention_map"]
    sink = r.variant == "sink" and "sink_share" in m
    weights = [[s] + row for s, row in zip(m["sink_share"], m["weights"])] if sink else m["weights"]
    size = len(m["weights"])
    # keys 1..size as Figs. 4 and 6 number layers; the sink column is 0
    extent = (-0.5 if sink else 0.5, size + 0.5, size + 0.5, 0.5)
    fig = image_figure(plt, weights, "key (0 = sink)" if sink else "key", "query",
                       f"Layer {m['layer']}, mean over heads\n{r.method()} ({r.name})", (5.6, 5.0),
                       extent=extent)
    save(fig, f"fig9_attention_map_{safe(r.model)}_{safe(r.name)}.png",
         f"Fig. 9: effective attention weights of layer {m['layer']}, first {m['size']} tokens, "
         f"mean over heads and sequences{'; column 0 is the sink' if sink else ''} ({r.name})")
