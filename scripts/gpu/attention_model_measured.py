#!/usr/bin/env python3
"""What a GPU measured beside what scripts/gpu/attention_model.py predicted for the same
kernels (docs/attention_model.md, "Measured on an H200, 2026-11-28"): the measured points
the model's calibration carries, the medians they come from (kdtrain bench --attention-only
rows of a GPU window's attention.jsonl), each kernel's measured clocks per tile / step by
the model's own schedule, and the variants' added time, like with like.

usage: attention_model_measured.py MODEL_JSON ATTENTION_JSONL
  MODEL_JSON: attention_model.py --json at the measured commit; prints the comparison tables.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_model_variants import FEATURES, variant_extras_ms  # noqa: E402  (same folder)

# The second GPU window of 2026-11-28 on an NVIDIA H200 at commit bff3506 (B 8, T 2048,
# H*D 2048, GQA 4, bf16): per kernel, (the model's prediction at that commit, H100 SXM
# assumptions; the median of the kdtrain rows that ran the kernel, host-timed per pass).
# The H200 is the H100's GH100 die (132 SMs, the same 1.98 GHz boost and 700 W) with
# HBM3e at 4.8 TB/s instead of 3.35: the model's clock (1.755 GHz) is kept for it.
H200 = {
    "source": "docs/gpu/2026-11-28-bff3506-2/raw.tgz: attention.jsonl, predictions.json (NVIDIA H200, bff3506)",
    "points": {
        "fwd mma_sync D64": (0.298, 0.647), "fwd wgmma D64": (0.209, 0.508),
        "bwd_main D64": (1.666, 2.183), "bwd_main atomics D64": (1.520, 1.912),
        "bwd_main wgmma D64": (0.767, 1.375), "bwd_main wgmma atomics D64": (0.802, 1.379),
        "fwd mma_sync D128": (0.414, 0.728), "fwd wgmma D128": (0.216, 0.378),
        "bwd_main D128": (1.498, 1.692), "bwd_main atomics D128": (1.391, 1.684),
        "bwd_main wgmma D128": (0.802, 1.163), "bwd_main wgmma atomics D128": (0.747, 1.193),
    },
}
H200_HBM_TBS = 4.3  # 4.8 TB/s peak at the share of it the model assumes reached on the H100 (3.0 of 3.35)


def label(pass_, kernel, d):
    """A point's name: the model's kernel name, "fwd " before a forward's, and the head dim."""
    return f"{'fwd ' if pass_ == 'forward' else ''}{kernel} D{d}"


def kernels_of(row):
    """{"forward", "backward"}: the model's names of the kernels a kdtrain row ran, as the
    window reads them (window_report.kernels_of), the forward being auto's on sm_90a
    (wgmma) where nothing names it: bff3506's rows name the backward kernel only. At
    bff3506 every wgmma forward, `train.attention_forward:wgmma` included, was the lockstep
    kernel (the model's "wgmma"): the warp-specialised one came later."""
    import window_report  # here: attention_model.py imports this file for H200 alone
    kernels = window_report.kernels_of(row)
    forward = kernels["forward"]
    return dict(kernels, forward="wgmma" if forward in (None, "wgmma ws") else forward)


def kernel_medians(rows):
    """{label: median ms} over the baseline kdtrain rows, each kernel's pass from every row
    that ran it, and how many rows that was."""
    times = {}
    for r in rows:
        if r.get("kind") != "kdtrain" or r.get("attention") != "baseline":
            continue
        k = kernels_of(r)
        times.setdefault(label("forward", k["forward"], r["D"]), []).append(r["forward_ms"])
        times.setdefault(label("backward", k["backward"], r["D"]), []).append(r["backward_ms"])
    return {k: (statistics.median(v), len(v)) for k, v in times.items()}


def measured_clk(k, ms, a):
    """The clocks per tile (forward) or step (backward) that make the model's own schedule of
    kernel k (a dict of attention_model.py's "kernels") take ms: the inverse of its timing,
    with its slot efficiency, launch, per-item overhead, chain lag and prep / finalize."""
    per_ms = a["clock_ghz"] * 1e6 * a["sms"] * k["slot_efficiency"]
    if "tile_pairs" in k:
        return (ms - a["launch_us"] / 1e3) * per_ms / k["tile_pairs"]
    main_ms = ms - k["prep_finalize_ms"]
    overhead = k["items"] * a["bwd_item_overhead_clk"]
    return (main_ms * per_ms - overhead) / (k["steps"] + k["lag_steps"] * a["sms"] * k["slot_efficiency"])


def kernel_comparison(model, points):
    """Per measured kernel: predicted and measured ms, their ratio, the model's clocks per
    tile / step (its lower bound and its no-overlap estimate) and the measured ones."""
    a = model["assumptions"]
    out = []
    for k in model["kernels"]:
        name = label("forward" if "tile_clk" in k else "backward", k["kernel"], k["D"])
        if name not in points:
            continue
        ms = points[name][1]
        clk = k.get("tile_clk", k.get("step_clk"))
        out.append({"kernel": name, "predicted_ms": k["ms"], "measured_ms": ms, "ratio": ms / k["ms"],
                    "no_overlap_ms": k["no_overlap_ms"], "model_clk": clk, "no_overlap_clk": k["no_overlap_clk"],
                    "measured_clk": measured_clk(k, ms, a), "bound": k["bound"]})
    return out


def where(measured_ms, predicted_ms, ranges):
    """Where a measured time falls against the band a range of predicted / measured gives a
    prediction ({"midpoints": (lo, hi), "ends": ...}): "in", "in the ends, over" (slower than
    the midpoints allow) or "under", "above" (slower than even the ends allow) or "below"."""
    def inside(which):
        lo, hi = ranges[which]
        return predicted_ms / hi - 1e-9 <= measured_ms <= predicted_ms / lo + 1e-9
    if inside("midpoints"):
        return "in"
    over = measured_ms > predicted_ms / ranges["midpoints"][0]
    if inside("ends"):
        return "in the ends, " + ("over" if over else "under")
    return "above" if over else "below"


def total_comparison(model, points):
    """Per fwd + bwd total of the model whose two kernels were measured: the lower bound, the
    band it carries (model["totals"][]["calibrated"]) and the measured sum of the two kernels'
    medians."""
    out = []
    for t in model["totals"]:
        f, b = (points.get(label(p, t[p], t["D"])) for p in ("forward", "backward"))
        if f and b:
            c = t["calibrated"]
            out.append({"D": t["D"], "kernels": f"{t['forward']} + {t['backward']}",
                        "lower_bound_ms": c["lower_bound_ms"], "band_ms": c["band_ms"],
                        "no_overlap_ms": t["no_overlap_ms"], "measured_ms": f[1] + b[1], "fwd_ms": t["fwd_ms"],
                        "bwd_ms": t["bwd_ms"]})
    return out


def variant_comparison(model, rows, backward, hbm_tbs=H200_HBM_TBS):
    """Per head dim and variant, for the rows without a build label (auto's kernels) whose
    backward is `backward`: measured and predicted ratio to the baseline, and per pass the
    ms the variant adds: measured, predicted, and predicted with its side kernels at
    hbm_tbs (its own kernel instantiations' part as predicted)."""
    mine = {(r["D"], r["attention"]): r for r in rows if r.get("kind") == "kdtrain" and not r.get("build")
            and kernels_of(r)["backward"] == backward}
    a = model["assumptions"]
    out = []
    for v in (v for v in model["variants"] if v["backward"] == backward):
        base = next(b for b in model["variants"] if (b["D"], b["variant"], b["backward"]) ==
                    (v["D"], "baseline", backward))
        r, r0 = mine.get((v["D"], v["variant"])), mine.get((v["D"], "baseline"))
        if r is None or r0 is None:
            continue
        here = variant_extras_ms(model["shape"], v["D"], FEATURES[v["variant"]], a)
        there = variant_extras_ms(model["shape"], v["D"], FEATURES[v["variant"]], dict(a, hbm_tbs=hbm_tbs))
        row = {"D": v["D"], "variant": v["variant"], "measured": r["fwd_bwd_ms"] / r0["fwd_bwd_ms"],
               "predicted": v["slowdown"]}
        for p, key, mkey in (("fwd", "fwd_ms", "forward_ms"), ("bwd", "bwd_ms", "backward_ms")):
            predicted = v[key] - base[key]
            row[p] = {"measured_ms": r[mkey] - r0[mkey], "predicted_ms": predicted,
                      "at_hbm_ms": predicted - here[p] + there[p]}
        out.append(row)
    return out


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    import attention_model as am  # here: it imports this file's H200 for its calibration
    model = json.load(open(argv[1]))
    rows = [json.loads(line) for line in open(argv[2]) if line.strip()]
    medians = kernel_medians(rows)
    points = {k: (None, m) for k, (m, _) in medians.items()}
    bt = am.CALIBRATION["back_test"]
    before = am.back_test_ranges({k: v for k, v in bt.items() if k.startswith("H100")})
    print("| kernel | rows | predicted ms | measured ms | measured / predicted | H100 back-test band | "
          "model clk | no-overlap clk | measured clk |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in kernel_comparison(model, points):
        print(f"| {c['kernel']} | {medians[c['kernel']][1]} | {c['predicted_ms']:.3f} | {c['measured_ms']:.3f} | "
              f"{c['ratio']:.2f} | {where(c['measured_ms'], c['predicted_ms'], before)} | {c['model_clk']:,.0f} | "
              f"{c['no_overlap_clk']:,.0f} | {c['measured_clk']:,.0f} |")
    print("\n| D | kernels | lower bound | H100 back-test band (in?) | band now (in?) | no-overlap | measured |")
    print("|---|---|---|---|---|---|---|")
    for t in total_comparison(model, points):
        old = am.calibrated(t["fwd_ms"], t["bwd_ms"], 1, {"fwd": before, "bwd": before})["band_ms"]
        ms, lb, (lo, hi) = t["measured_ms"], t["lower_bound_ms"], t["band_ms"]
        covered = "in" if lo - 1e-9 <= ms <= hi + 1e-9 else "out"
        print(f"| {t['D']} | {t['kernels']} | {lb:.3f} | {old[0]:.2f}-{old[1]:.2f} ({where(ms, lb, before)}) | "
              f"{lo:.2f}-{hi:.2f} ({covered}) | {t['no_overlap_ms']:.3f} | {ms:.3f} |")
    print(f"\n| D | variant | × baseline, measured | predicted | fwd ms added: measured | predicted (side kernels at "
          f"{H200_HBM_TBS} TB/s) | bwd ms added: measured | predicted (at {H200_HBM_TBS} TB/s) |")
    print("|---|---|---|---|---|---|---|---|")
    for v in variant_comparison(model, rows, "bwd_main"):
        f, b = v["fwd"], v["bwd"]
        print(f"| {v['D']} | {v['variant']} | {v['measured']:.2f} | {v['predicted']:.2f} | {f['measured_ms']:.3f} | "
              f"{f['predicted_ms']:.3f} ({f['at_hbm_ms']:.3f}) | {b['measured_ms']:.3f} | "
              f"{b['predicted_ms']:.3f} ({b['at_hbm_ms']:.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
