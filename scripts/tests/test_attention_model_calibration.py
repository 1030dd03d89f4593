"""scripts/gpu/attention_model.py's calibration arithmetic, without nvcc: the range of
predicted / measured a back-test gives (per pass), the band it implies for a fwd + bwd
prediction (each pass's prediction divided by its range), and the bias under which a target
is still met (docs/attention_model.md); the calibration data (the H100 review's and the
H200's measured points); and the L2 round trip above which the dq writer warp bounds the
backward's step."""
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model  # noqa: E402

# Two made-up kernels: predicted 0.6-0.8 ms against 1.0 measured, 1.0-1.4 against 2.0.
# Midpoint ratios 0.7 and 0.6; ends 0.6, 0.8, 0.5, 0.7.
BACK_TEST = {"s: fwd a": (0.6, 0.8, 1.0), "s: bwd b": (1.0, 1.4, 2.0)}
SAME = attention_model.back_test_ranges(BACK_TEST)


def test_back_test_ranges_of_midpoints_and_ends():
    assert SAME["midpoints"] == pytest.approx((0.6, 0.7))
    assert SAME["ends"] == pytest.approx((0.5, 0.8))
    # One pass: only its own points.
    assert attention_model.back_test_ranges(BACK_TEST, "fwd") == {"midpoints": (0.7, 0.7), "ends": (0.6, 0.8)}
    assert attention_model.back_test_ranges(BACK_TEST, "bwd") == {"midpoints": (0.6, 0.6), "ends": (0.5, 0.7)}


def test_band_divides_each_pass_by_its_ratio_range():
    c = attention_model.calibrated(0.2, 1.0, 1.5, {"fwd": SAME, "bwd": SAME})
    assert c["lower_bound_ms"] == pytest.approx(1.2)
    assert c["band_ms"] == pytest.approx([1.2 / 0.7, 1.2 / 0.6])
    assert c["band_ends_ms"] == pytest.approx([1.2 / 0.8, 1.2 / 0.5])
    # Low by 20% (predicted / measured 0.8) puts the measured time exactly on the target.
    assert c["target_met_if_low_by_under"] == pytest.approx(0.2)
    assert 1.2 / (1 - c["target_met_if_low_by_under"]) == pytest.approx(1.5)
    per_pass = {p: attention_model.back_test_ranges(BACK_TEST, p) for p in ("fwd", "bwd")}
    c = attention_model.calibrated(0.2, 1.0, 1.5, per_pass)
    assert c["band_ms"] == pytest.approx([0.2 / 0.7 + 1.0 / 0.6, 0.2 / 0.7 + 1.0 / 0.6])
    assert c["band_ends_ms"] == pytest.approx([0.2 / 0.8 + 1.0 / 0.7, 0.2 / 0.6 + 1.0 / 0.5])


def test_lines_say_when_a_target_holds_and_when_it_is_missed():
    both = {"fwd": SAME, "bwd": SAME}
    met = {"D": 64, "forward": "f", "backward": "x", "target_ms": 1.5, "calibrated": attention_model.calibrated(0.2, 1.0, 1.5, both)}
    assert attention_model.calibration_line(met) == (
        "D 64 (f + x): lower bound 1.200 ms, back-test band 1.71-2.00 ms (ends 1.50-2.40); "
        "meets 1.5 ms only if the model is low by < 20%")
    missed = dict(met, calibrated=attention_model.calibrated(0.6, 1.0, 1.5, both))
    assert missed["calibrated"]["target_met_if_low_by_under"] < 0
    assert attention_model.calibration_line(missed).endswith("misses 1.5 ms even at the lower bound")


def test_calibration_data_gives_the_reviews_ratios():
    """The review's table states the midpoints 0.78 / 0.72 / 0.66 / 0.79 (fwd D64, fwd D128,
    bwd D64, bwd D128) and "low by 21-34%": the transcribed ranges must give them back."""
    bt = {k.split(": ")[1]: v for k, v in attention_model.CALIBRATION["back_test"].items() if k.startswith("H100")}
    mids = {k: (lo + hi) / 2 / m for k, (lo, hi, m) in bt.items()}
    assert mids == pytest.approx({"fwd D64": 0.78, "fwd D128": 0.72, "bwd D64": 0.66, "bwd D128": 0.79}, abs=0.005)
    r = attention_model.back_test_ranges(bt)
    assert [round(100 * (1 - x)) for x in reversed(r["midpoints"])] == [21, 34]
    assert r["ends"] == pytest.approx((0.60, 0.91), abs=0.005)


def test_h200_points_widen_each_pass_to_cover_todays_kernels():
    """With the H200's twelve points (2026-11-28) the forward's predicted / measured spans
    0.41 (the wgmma forward at D 64) to 0.78 (the review's), the backward's 0.56 (wgmma, D
    64) to 0.89 (mma.sync, D 128): docs/attention_model.md, "Measured on an H200"."""
    bt = attention_model.CALIBRATION["back_test"]
    assert sum(k.startswith("H200 bff3506: ") for k in bt) == 12
    fwd, bwd = (attention_model.back_test_ranges(bt, p)["midpoints"] for p in attention_model.PASSES)
    assert fwd == pytest.approx((0.41, 0.78), abs=0.005)
    assert bwd == pytest.approx((0.56, 0.89), abs=0.005)
    # Every H200 point is one prediction (no range) and every one was a lower bound.
    for k, (lo, hi, m) in bt.items():
        assert k.startswith("H100") or (lo == hi and lo < m), k


@pytest.mark.parametrize("d", [64, 128])
def test_writer_bounds_the_step_exactly_above_its_round_trip_threshold(d):
    a = attention_model.ASSUME
    mma_clk = 2000.0
    rt = attention_model.writer_bound_round_trip(mma_clk, d, 64, a)
    assert rt > 0
    at = attention_model.dq_writer_warp_clk(d, 64, dict(a, l2_round_trip_clk=rt))
    assert at == pytest.approx(mma_clk)
    assert attention_model.dq_writer_warp_clk(d, 64, dict(a, l2_round_trip_clk=rt + 1)) > mma_clk
    assert attention_model.dq_writer_warp_clk(d, 64, dict(a, l2_round_trip_clk=rt - 1)) < mma_clk
