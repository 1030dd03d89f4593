# coding=utf-8
"""kdtrain's attention variants and the features each switches on: Python's one
copy of the table in src/config/attention_variant.h (scripts/tests/test_variants.py
holds it equal to `kdtrain info --variants --json`).

Plain Python with no imports, so the exported modeling code (`kdtrain export`
writes this file next to configuration_kdtrain.py and modeling_kdtrain.py), the
reference model, the PyTorch peers and the reports all read it.
"""
from collections import namedtuple

Features = namedtuple("Features", ["sink", "affine", "gate"])
# One row per variant: its name, its features, its name in the paper's tables
# (scripts/report/report_runs.py) and the formulation of its PyTorch peer
# (scripts/peers/torch_attention.py).
Variant = namedtuple("Variant", ["name", "features", "method", "torch_formulation"])

# In the order of the C++ table.
VARIANT_ROWS = (
    Variant("baseline", Features(sink=False, affine=False, gate=False), "Baseline",
            "SDPA flash (causal, enable_gqa)"),
    Variant("sink", Features(sink=True, affine=False, gate=False), "Sink",
            "FlexAttention (causal block mask, compiled) returning lse; out * sigmoid(lse - s_h)"),
    Variant("affine", Features(sink=False, affine=True, gate=False), "Affine-Scaled",
            "SDPA flash; alpha*out + beta*cumsum(V) in fp32"),
    Variant("gated", Features(sink=False, affine=False, gate=True), "Gated",
            "SDPA flash; out * sigmoid(gate)"),
    Variant("affine-gated", Features(sink=False, affine=True, gate=True), "Affine-Scaled + Gated",
            "SDPA flash; alpha*out + beta*cumsum(V) in fp32; * sigmoid(gate)"),
)
FEATURES = {row.name: row.features for row in VARIANT_ROWS}
ATTENTION_VARIANTS = tuple(FEATURES)
ALPHA_ACTIVATIONS = ("linear_clip", "sigmoid")
# N of the affine bias beta = (alpha_ma - alpha) / N (docs/model.md): "sequence" = the keys of the
# call (the paper's, kdtrain's default), "visible" = i + 1 per query. A config.json without
# the key predates it and means "visible".
AFFINE_BIAS_DIVISORS = ("sequence", "visible")
AFFINE_BIAS_DIVISOR_BEFORE_KEY = "visible"
# N of "sequence" outside training (the C++ AffineInferenceN; the first is the default):
# "train_length" = N fixed at the train.seq_len the weights trained at (config key
# affine_train_length; unknown: the call's keys), "keys" = the keys of the call.
AFFINE_INFERENCE_NS = ("train_length", "keys")


def affine_fixed_n(bias_divisor, inference_n, train_length):
    """The fixed N of an affine model's bias, or None when N is the call's keys (or i + 1)."""
    if bias_divisor == "sequence" and inference_n == "train_length" and train_length:
        return int(train_length)
    return None
# Every (variant, alpha activation) pair with maths of its own, for the tests: each
# activation where the affine term uses alpha, linear_clip (unused) elsewhere.
VARIANT_CASES = tuple((v, a) for v, f in FEATURES.items()
                      for a in (ALPHA_ACTIVATIONS if f.affine else ALPHA_ACTIVATIONS[:1]))


def features(variant):
    """The features of `variant`; ValueError naming the choices otherwise."""
    if variant not in FEATURES:
        raise ValueError(f"unknown attention variant {variant!r} (one of {', '.join(ATTENTION_VARIANTS)})")
    return FEATURES[variant]
