"""scripts/gpu/attention_model_variants.py's per-variant side costs, without nvcc: what each variant
adds beyond its own instantiations of the attention kernels (docs/attention_model.md,
"Variants"). Byte counts are exact integers here: the rates are set so that 1 ms is 1,000
bytes, and launches cost nothing unless a case says so."""
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model_variants as variants  # noqa: E402

RATES = {"hbm_tbs": 1e-6, "l2_tbs": 1e-6, "launch_us": 0.0}  # 1,000 bytes per ms
SHAPE = {"B": 1, "T": 4, "HD": 16, "gqa": 2}  # D 4: H 4 query heads over 2 kv heads
D = 4
Q, KV = 1 * 4 * 4 * 4, 1 * 4 * 2 * 4  # elements of out and of v


def split(variant, shape=SHAPE, a=RATES):
    return variants.variant_extras_ms(shape, D, variants.FEATURES[variant], a)


def extras(variant, shape=SHAPE, a=RATES):
    return sum(split(variant, shape, a).values())


def test_baseline_and_sink_add_nothing_outside_their_kernels():
    assert extras("baseline") == 0
    assert extras("sink") == 0


def test_gate_moves_eight_bf16_values_per_output_element():
    # forward: inp, gate in, out written (3); backward: dout, inp, gate in, dinp, dgate out (5)
    assert extras("gated") * 1000 == pytest.approx(8 * 2 * Q)
    assert {k: v * 1000 for k, v in split("gated").items()} == pytest.approx({"fwd": 3 * 2 * Q, "bwd": 5 * 2 * Q})


def test_affine_side_kernels_scale_with_the_kv_heads_and_the_epilogue_with_the_query_heads():
    # v scanned twice (bf16 read twice, fp32 written: 8 bytes an element each time), u written,
    # scanned (fp32 read twice, written) and read back (20 bytes an element); the forward
    # epilogue's fp32 prefix per query head from L2 (4 bytes an element of out).
    assert extras("affine") * 1000 == pytest.approx(16 * KV + 20 * KV + 4 * Q)
    # The forward pays one v scan and the prefix read; the backward the other scan and u.
    assert {k: v * 1000 for k, v in split("affine").items()} == pytest.approx({"fwd": 8 * KV + 4 * Q,
                                                                              "bwd": 8 * KV + 20 * KV})
    # Twice the query heads per kv head: the kv part halves, the epilogue's part stays.
    fewer_kv = dict(SHAPE, gqa=4)
    assert extras("affine", fewer_kv) * 1000 == pytest.approx(36 * KV / 2 + 4 * Q)


def test_affine_gated_pays_both_and_launches_count():
    assert extras("affine-gated") == pytest.approx(extras("affine") + extras("gated"))
    with_launches = dict(RATES, launch_us=1000.0)  # 1 ms a launch
    assert extras("affine", a=with_launches) - extras("affine") == pytest.approx(6)  # 2 v scans, u scan: 2 each
    assert extras("gated", a=with_launches) - extras("gated") == pytest.approx(2)


def test_rows_add_each_pass_its_side_kernels_and_divide_by_the_baseline():
    def forward(sink, affine):
        return {"kernel": "f", "ms": 1.0 + 0.5 * affine, "bound": "tensor"}

    def backward(affine):
        return {"kernel": "b", "ms": 2.0 + affine, "bound": "smem"}
    rows = {r["variant"]: r for r in variants.variant_rows(forward, backward, SHAPE, D, RATES)}
    assert set(rows) == set(variants.FEATURES)
    assert rows["baseline"]["fwd_bwd_ms"] == 3.0 and rows["baseline"]["slowdown"] == 1.0
    affine = rows["affine"]
    side = split("affine")
    assert affine["fwd_ms"] == pytest.approx(1.5 + side["fwd"]) and affine["bwd_ms"] == pytest.approx(3.0 + side["bwd"])
    assert affine["slowdown"] == pytest.approx((4.5 + side["fwd"] + side["bwd"]) / 3.0)
    assert "missed by affine" in variants.variants_line([rows["baseline"], affine])
