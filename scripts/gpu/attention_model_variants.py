"""The attention variants in the performance model (scripts/gpu/attention_model.py): each
variant's fwd + bwd at one shape, from its own instantiations of the attention kernels
(SASS-counted by the caller's forward and backward) plus what it runs besides them, and its
ratio to the baseline's (variant_attn_slowdown). docs/attention_model.md, "Variants"."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import FEATURES  # noqa: E402

VARIANT_TARGET = 1.10  # each variant's fwd + bwd over the baseline's, at most


def variant_extras_ms(shape, d, feats, a):
    """{"fwd", "bwd"} ms a variant adds beyond its own instantiations of the forward and
    backward main kernels (whose loops the SASS count covers), as bytes at HBM (or L2) rate
    plus launches; what differs inside the kernels' epilogues or the backward's prep is not
    counted. Affine: the v prefix scan before the forward and again in the backward (2
    launches each, its bf16 input read twice, fp32 out), the forward epilogue's fp32 prefix
    rows (read per query head, from L2), u (fp32, written by the prep, then scanned in
    reverse: 2 launches, read twice, written once) and its scan read by the dK / dV
    epilogue. Gate: the sigmoid gate's own forward (inp, gate in; out) and backward (dout,
    inp, gate in; dinp, dgate out) kernels, outside the attention kernels
    (kernels/sigmoid_gate.cuh)."""
    B, T, H = shape["B"], shape["T"], shape["HD"] // d
    kv, q = B * T * (H // shape["gqa"]) * d, B * T * H * d  # elements of v (one head per group) and of out
    out = {}
    for pass_ in ("fwd", "bwd"):
        hbm = l2 = launches = 0
        if feats.affine:
            hbm += 2 * kv * 2 + kv * 4  # the v scan: bf16 read twice, fp32 written
            launches += 2
            if pass_ == "fwd":
                l2 += q * 4
            else:
                hbm += kv * 4 + 2 * kv * 4 + kv * 4 + kv * 4  # u written; its scan (read twice, written); read back
                launches += 2
        if feats.gate:
            hbm += (3 if pass_ == "fwd" else 5) * q * 2
            launches += 1
        out[pass_] = hbm / (a["hbm_tbs"] * 1e9) + l2 / (a["l2_tbs"] * 1e9) + launches * a["launch_us"] / 1e3
    return out


def variant_rows(forward, backward, shape, d, a):
    """Every variant's row at head dim d: forward(sink, affine) and backward(affine) give
    the kernels' predictions (dicts with "kernel", "ms", "bound"), variant_extras_ms the
    rest; fwd_ms and bwd_ms include each pass's side kernels, slowdown is over the baseline."""
    rows = []
    for name, feats in FEATURES.items():
        f, b = forward(feats.sink, feats.affine), backward(feats.affine)
        extra = variant_extras_ms(shape, d, feats, a)
        rows.append({"D": d, "variant": name, "forward": f["kernel"], "backward": b["kernel"],
                     "fwd_ms": f["ms"] + extra["fwd"], "bwd_ms": b["ms"] + extra["bwd"],
                     "extras_ms": extra["fwd"] + extra["bwd"], "fwd_bwd_ms": f["ms"] + b["ms"] + sum(extra.values()),
                     "fwd_bound": f["bound"], "bwd_bound": b["bound"]})
    base = next(r["fwd_bwd_ms"] for r in rows if r["variant"] == "baseline")
    for r in rows:
        r["slowdown"] = r["fwd_bwd_ms"] / base
    return rows


def variants_line(rows):
    """One head dim's variants on one pair of kernels: each one's fwd + bwd lower bound and
    ratio to the baseline, against VARIANT_TARGET."""
    over = [r["variant"] for r in rows if r["slowdown"] > VARIANT_TARGET]
    return (f"D {rows[0]['D']} variants ({rows[0]['forward']} + {rows[0]['backward']} + side kernels, lower "
            "bounds): " + ", ".join(f"{r['variant']} {r['fwd_bwd_ms']:.3f} ms ({r['slowdown']:.2f}x)" for r in rows) +
            f"; variant_attn_slowdown target <= {VARIANT_TARGET:.2f}x: " +
            (f"missed by {', '.join(over)}" if over else "met by all"))
