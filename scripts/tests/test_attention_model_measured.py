"""scripts/gpu/attention_model_measured.py, without nvcc or a GPU: which kernels a measured row
ran, the medians per kernel, the clocks per tile / step that make the model's own schedule
take a measured time (the inverse of attention_model.py's timing), where a time falls in a
band, the variants' added time with the side kernels at another HBM rate; and that every fwd
+ bwd band the model's calibration now gives covers the H200's measured sums
(docs/attention_model.md, "Measured on an H200, 2026-11-28")."""
import io
import json
import sys
import tarfile

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model  # noqa: E402
import attention_model_measured as measured  # noqa: E402

A = attention_model.ASSUME


def row(D, fwd, bwd, build=None, attention="baseline", reason="fused kernels; backward kernel mma_sync"):
    r = {"kind": "kdtrain", "D": D, "attention": attention, "forward_ms": fwd, "backward_ms": bwd,
         "fwd_bwd_ms": fwd + bwd, "attention_paths": [{"reason": reason}]}
    return dict(r, build=build) if build else r


def test_kernels_of_reads_the_build_label_then_the_path():
    assert measured.kernels_of(row(64, 1, 1)) == {"forward": "wgmma", "backward": "bwd_main"}
    assert measured.kernels_of(row(64, 1, 1, "atomic-dq")) == {"forward": "wgmma", "backward": "bwd_main atomics"}
    assert measured.kernels_of(row(64, 1, 1, "atomic-dq+train.attention_backward:wgmma")) == {
        "forward": "wgmma", "backward": "bwd_main wgmma atomics"}
    assert measured.kernels_of(row(64, 1, 1, "train.attention_forward:mma_sync")) == {
        "forward": "mma_sync", "backward": "bwd_main"}
    # A default build whose path names its kernels (auto once the backward is wgmma).
    named = "fused; forward kernel mma_sync; backward kernel wgmma_sm90a"
    assert measured.kernels_of(row(64, 1, 1, reason=named)) == {"forward": "mma_sync", "backward": "bwd_main wgmma"}
    # The build label's choice wins over the path's words.
    assert measured.kernels_of(row(64, 1, 1, "train.attention_backward:mma_sync", reason=named))["backward"] == \
        "bwd_main"


def test_medians_take_each_kernel_from_every_baseline_row_that_ran_it():
    rows = [row(64, 0.5, 2.0), row(64, 0.7, 2.2, "train.attention_forward:mma_sync"),
            row(64, 0.6, 1.4, "train.attention_backward:wgmma"), row(64, 0.9, 9.0, attention="affine"),
            {"kind": "torch", "D": 64, "ms": 1.0}]
    m = measured.kernel_medians(rows)
    assert m == {"fwd wgmma D64": (pytest.approx(0.55), 2), "fwd mma_sync D64": (0.7, 1),
                 "bwd_main D64": (pytest.approx(2.1), 2), "bwd_main wgmma D64": (1.4, 1)}


def test_measured_clk_inverts_the_forwards_timing():
    k = {"tile_pairs": 34816, "slot_efficiency": 0.9}
    clk = 1500.0
    ms = k["tile_pairs"] * clk / A["sms"] / k["slot_efficiency"] / (A["clock_ghz"] * 1e6) + A["launch_us"] / 1e3
    assert measured.measured_clk(k, ms, A) == pytest.approx(clk)


@pytest.mark.parametrize("lag", [0.0, 3.75])
def test_measured_clk_inverts_the_backwards_timing(lag):
    order = [64, 60, 56, 52] * 40 + [8] * 7  # steps per work item, ticket order
    clk = 4000.0
    main_ms, eff = attention_model.backward_main_ms(order, clk, lag, A)
    k = {"steps": sum(order), "items": len(order), "lag_steps": lag, "slot_efficiency": eff, "prep_finalize_ms": 0.1}
    assert measured.measured_clk(k, main_ms + 0.1, A) == pytest.approx(clk)
    # A slower measurement reads as more clocks per step, not as more per item.
    assert measured.measured_clk(k, 1.1 * main_ms + 0.1, A) > 1.09 * clk


def test_where_a_time_falls_in_a_band():
    r = {"midpoints": (0.6, 0.8), "ends": (0.5, 0.9)}  # predicted / measured
    # Predicted 1.0: the midpoints put the measured time at 1.25-1.67, the ends at 1.11-2.0.
    assert measured.where(1.4, 1.0, r) == "in"
    assert measured.where(1.9, 1.0, r) == "in the ends, over"
    assert measured.where(1.15, 1.0, r) == "in the ends, under"
    assert measured.where(2.1, 1.0, r) == "above"
    assert measured.where(1.05, 1.0, r) == "below"


def test_no_overlap_adds_the_tensor_pipe_to_the_busiest_other_and_ignores_the_writer():
    pipes = {"tensor": 1500, "smem": 1800, "mufu": 500, "issue": 1700, "dq_writer": 9000}
    assert attention_model.no_overlap_clk(pipes) == 3300
    assert attention_model.no_overlap_clk(pipes) >= max(v for k, v in pipes.items() if k != "dq_writer")


def test_gated_side_kernels_scale_with_the_hbm_rate_and_its_launch_does_not():
    # Rates where 1 ms is 1,000 bytes and a launch 1 ms. 64 output elements (B 1, T 4, H 4,
    # D 4): the gate moves 3 bf16 values an element forward (384 bytes), 5 backward (640).
    shape = {"B": 1, "T": 4, "HD": 16, "gqa": 2}
    model = {"shape": shape, "assumptions": dict(A, hbm_tbs=1e-6, launch_us=1000.0), "variants": [
        {"D": 4, "variant": v, "backward": "bwd_main", "fwd_ms": f, "bwd_ms": b, "fwd_bwd_ms": f + b, "slowdown": s}
        for v, f, b, s in (("baseline", 1.0, 2.0, 1.0), ("gated", 1.0 + 1.384, 2.0 + 0.05 + 1.640, 2.0))]}
    rows = [row(4, 1.0, 2.0), row(4, 1.5, 2.5, attention="gated")]
    base, v = measured.variant_comparison(model, rows, "bwd_main", hbm_tbs=2e-6)
    assert base["variant"] == "baseline" and base["measured"] == 1.0 and base["bwd"]["at_hbm_ms"] == 0
    assert v["fwd"]["measured_ms"] == pytest.approx(0.5) and v["bwd"]["measured_ms"] == pytest.approx(0.5)
    assert v["fwd"]["predicted_ms"] == pytest.approx(1.384) and v["bwd"]["predicted_ms"] == pytest.approx(1.690)
    # At twice the rate the bytes take half as long; the launch and the kernel's own 0.05 stay.
    assert v["fwd"]["at_hbm_ms"] == pytest.approx(1.192)
    assert v["bwd"]["at_hbm_ms"] == pytest.approx(0.05 + 1.320)
    assert v["measured"] == pytest.approx(4.0 / 3.0) and v["predicted"] == 2.0
    # Another backward's rows are not compared.
    assert measured.variant_comparison(model, rows, "bwd_main wgmma") == []


def test_every_band_the_calibration_gives_covers_the_h200s_measured_sums():
    """The model's fwd + bwd bands (each pass's prediction divided by its pass's range, then
    added) must hold the sum of the two kernels' measured medians, for every forward and
    backward the H200 ran: the recalibration's purpose. Dropping a point breaks it."""
    bt = attention_model.CALIBRATION["back_test"]
    ranges = {p: attention_model.back_test_ranges(bt, p) for p in attention_model.PASSES}
    pts = measured.H200["points"]
    fwds = [k for k in pts if k.startswith("fwd")]
    bwds = [k for k in pts if not k.startswith("fwd")]
    for f in fwds:
        for b in (b for b in bwds if b.endswith(f.split()[-1])):
            (pf, mf), (pb, mb) = pts[f], pts[b]
            c = attention_model.calibrated(pf, pb, 1.0, ranges)
            assert c["band_ms"][0] - 1e-9 <= mf + mb <= c["band_ms"][1] + 1e-9, (f, b)
            assert c["lower_bound_ms"] < mf + mb
    # Without the H200 points (the H100 review's alone) the wgmma backward at D 64 fell out.
    before = attention_model.back_test_ranges({k: v for k, v in bt.items() if k.startswith("H100")})
    (pf, mf), (pb, mb) = pts["fwd wgmma D64"], pts["bwd_main wgmma D64"]
    old = attention_model.calibrated(pf, pb, 1.0, {"fwd": before, "bwd": before})
    assert mf + mb > old["band_ends_ms"][1]


def test_the_h200_points_are_the_medians_of_the_imported_window():
    """H200["points"] transcribes the window's medians (docs/gpu/2026-11-28-bff3506-2/raw.tgz)
    and its packed predictions: reading them again must give the same numbers."""
    raw = REPO / "docs" / "gpu" / "2026-11-28-bff3506-2" / "raw.tgz"
    if not raw.exists():
        pytest.skip(f"{raw} not in this checkout")
    with tarfile.open(raw) as t:
        text = t.extractfile("./attention.jsonl").read().decode()
        model = json.load(io.BytesIO(t.extractfile("./predictions.json").read()))
    medians = measured.kernel_medians([json.loads(line) for line in text.splitlines() if line.strip()])
    pts = measured.H200["points"]
    assert set(medians) == set(pts)
    for k, (m, _) in medians.items():
        assert pts[k][1] == pytest.approx(m, abs=5e-4), k
    predicted = {measured.label("forward" if "tile_clk" in k else "backward", k["kernel"], k["D"]): k["ms"]
                 for k in model["kernels"]}
    for k, (p, _) in pts.items():
        assert p == pytest.approx(predicted[k], abs=5e-4), k
