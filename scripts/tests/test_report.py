"""scripts/report/report.py on synthetic run directories, statistics checked by hand."""
import csv
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "report" / "report.py"
spec = importlib.util.spec_from_file_location("kdtrain_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
sys.modules["kdtrain_report"] = report
spec.loader.exec_module(report)
import report_tables  # noqa: E402  (report.py put scripts/ on sys.path)

LLAMA_1B = {"preset": "llama3.2-1b", "num_hidden_layers": 16, "hidden_size": 2048,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}
# Steps 1..9 and one step past 500 that Tables 4/5 must ignore.
GRAD = [10, 11, 9, 10, 12, 8, 10, 17, 30]


def write_run(root: Path, name: str, variant: str, losses, grads, extra_steps=None, analysis=None,
              zero_shot=True, ppl=61.9, alpha=None, soft_ce=True, limit=None, divisor="sequence"):
    run = root / name
    run.mkdir()
    attention = {"variant": variant, **({"alpha_activation": alpha} if alpha else {}),
                 **({"affine_bias_divisor": divisor} if divisor else {})}
    kd = {"teacher": "/teachers/Llama-3.2-3B", "weight": 1.0}
    (run / "config.json").write_text(json.dumps({"model": LLAMA_1B, "attention": attention, "kd": kd}))
    rows = []
    for i, (loss, g) in enumerate(zip(losses, grads), 1):
        # the optimised loss is the forward KL; soft_ce = KL + teacher entropy (here 2.5)
        row = {"step": i, "loss": loss - 2.5, "kd": loss - 2.5, "grad_norm": g,
               report.LOGIT_KEY: 3.0 - 0.1 * i}
        if name == "base" and i % 3 == 0:  # Fig. 2's all-position probe at validation steps
            row["attn_logit_mean_abs_all"] = 2.0 - 0.1 * i
        if soft_ce:
            row["soft_ce"] = loss
        rows.append(row)
    for step, loss, g in extra_steps or []:
        rows.append({"step": step, "loss": loss - 2.5, "kd": loss - 2.5, "grad_norm": g,
                     **({"soft_ce": loss} if soft_ce else {})})
    with open(run / "metrics.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write("\n")
    if ppl is not None:
        (run / "eval_c4.json").write_text(json.dumps(
            {"perplexity": ppl, "mean_ce": math.log(ppl), "bits_per_byte": 0.8125, "seq_len": 2048,
             "word_perplexity": ppl ** 1.3, "words": 157538.5, "bytes": 840000,
             "windows": 100, "windows_available": 100, "tokens": 204800,
             "data_manifest": {"documents": 1000, "inputs": ["/d/c4_validation_2k.jsonl"],
                               "tokenizer": {"path": "/tok/llama3"}}}))
    if zero_shot:
        tasks = {"winogrande": 0.556, "piqa": 0.724, "hellaswag": 0.531, "arc_challenge": 0.352,
                 "arc_easy": 0.625, "boolq": 0.615}
        splits = {"arc_easy": ("test", 2376), "arc_challenge": ("test", 1172)}
        (run / "zero_shot.json").write_text(json.dumps(
            {"tasks": {k: {"value": v, "split": splits.get(k, ("validation", 1000))[0],
                           "examples": min(limit or 10**9, splits.get(k, ("", 1000))[1]),
                           "split_size": splits.get(k, ("", 1000))[1], "official_split": True}
                       for k, v in tasks.items()},
             "average": sum(tasks.values()) / 6, "limit": limit}))
    if analysis:
        (run / "analysis").mkdir()
        (run / "analysis" / "analysis.json").write_text(json.dumps(analysis))
    return run


def synthetic_analysis(L=2, H=3, variant="affine"):
    return {"attention": variant, "num_layers": L, "num_heads": H,
            "first_token_weight": [0.5, 0.3], "entropy": [1.2, 1.9],
            "query_mass": {"edges": [0, 0.25, 0.5, 0.75, 1.0], "counts": [1, 5, 3, 2],
                           "mean": 0.5, "median": 0.45},
            "query_mass_excl_first": {"edges": [-0.5, 0, 0.5, 1.0, 1.5], "counts": [1, 2, 6, 2],
                                      "mean": 0.6, "median": 0.62},
            "query_weight_sum": {"edges": [0, 0.5, 1.0, 1.5], "counts": [2, 6, 3],
                                 "mean": 0.8, "median": 0.79},
            "head_mass": [[0.1, 0.5, 0.9], [0.3, 0.7, 1.0]],
            "attention_map": {"layer": 2, "size": 3,
                              "weights": [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]],
                              "sink_share": [0.1, 0.2, 0.3]}}


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_statistics_by_hand():
    s = report.grad_norm_stats(GRAD)
    # sum 117, mean 13; squared deviations 9+4+16+9+1+25+9+16+289 = 378 -> variance 42
    assert s["mean"] == pytest.approx(13.0)
    assert s["variance"] == pytest.approx(42.0)
    assert s["std"] == pytest.approx(math.sqrt(42.0))
    assert s["cv"] == pytest.approx(math.sqrt(42.0) / 13.0)
    # median 10; |g - 10| sorted 0,0,0,1,1,2,2,7,20 -> MAD 1; tau6 = 16, tau9 = 19
    assert report.spike_count(GRAD, 6) == (2, 16.0)   # 17 and 30
    assert report.spike_count(GRAD, 9) == (1, 19.0)   # 30
    assert report.spike_count([1.0, 1.0, 1.0], 6) == (0, 1.0)
    assert report.grad_norm_stats([])["mean"] is None


def test_delta_params_from_config_matches_paper_1b():
    assert report.delta_params_from_config(LLAMA_1B, "affine") / 1e6 == pytest.approx(1.048576)
    assert report.delta_params_from_config(LLAMA_1B, "gated") / 1e6 == pytest.approx(67.108864)
    assert report.delta_params_from_config(LLAMA_1B, "affine-gated") / 1e6 == pytest.approx(68.15744)
    assert report.delta_params_from_config(LLAMA_1B, "sink") == 16 * 32
    assert report.delta_params_from_config(LLAMA_1B, "baseline") == 0


def test_report_tables_and_figures(tmp_path):
    losses = [3.0, 2.9, 2.8, 2.75, 2.7, 2.71, 2.69, 2.74, 2.72]
    base = write_run(tmp_path, "base", "baseline", losses, GRAD,
                     extra_steps=[(600, 2.70, 1000.0)])
    aff = write_run(tmp_path, "aff", "affine", losses, [1.0] * 9, analysis=synthetic_analysis(),
                    ppl=58.9, limit=5)
    sig = write_run(tmp_path, "aff-sig", "affine", losses, [1.0] * 9, alpha="sigmoid", ppl=60.0)
    # Table 3 as the paper runs it: affine-gated with both activations (the gated pair),
    # the plain-affine pair above as extra rows.
    ag = write_run(tmp_path, "ag", "affine-gated", losses, [1.0] * 9, ppl=57.0)
    ag_sig = write_run(tmp_path, "ag-sig", "affine-gated", losses, [1.0] * 9, alpha="sigmoid", ppl=57.5)
    # a run from before the divisor key: labelled with the divisor it used
    old_aff = write_run(tmp_path, "old-aff", "affine-gated", losses, [1.0] * 9, divisor=None)
    (old_aff / "study_row.json").write_text(json.dumps({"size": "3B"}))
    gated = write_run(tmp_path, "gated", "gated", losses, [2.0] * 9, zero_shot=False, ppl=None)
    old = write_run(tmp_path, "old", "sink", losses, [2.0] * 9, soft_ce=False,
                    analysis=synthetic_analysis(variant="sink"))
    # A second size with a baseline and one affine run only (study_row.json names the size).
    small = [write_run(tmp_path, n, v, losses, [0.5] * 9) for n, v in (("s-base", "baseline"), ("s-aff", "affine"))]
    for run in small:
        (run / "study_row.json").write_text(json.dumps({"size": "0.5B"}))
    # info.json overrides the computed ΔParams
    (gated / "info.json").write_text(json.dumps({"delta_params": 67100000}))
    out = tmp_path / "report"
    assert report.main([str(aff), str(gated), str(base), str(sig), str(old), str(ag), str(ag_sig), str(old_aff),
                        *map(str, small), "--out", str(out),
                        "--loss-steps", "2", "--title", "T", "--note", "smoke"]) == 0

    t1 = read_csv(out / "table1.csv")
    assert t1[0] == report.MAIN_COLUMNS
    col = {c: i for i, c in enumerate(t1[0])}
    # variant order; gated and the sigmoid affine run are not Table 1 rows
    assert [(r[col["Method"]], r[col["Run"]]) for r in t1[1:] if r[0] == "1B"] == [
        ("Baseline", "base"), ("Sink", "old"), ("Affine-Scaled ‡", "aff")]
    assert [r[col["Run"]] for r in t1[1:] if r[0] == "0.5B"] == ["s-base", "s-aff"]
    t1 = [t1[0]] + [r for r in t1[1:] if r[0] == "1B"]
    b = t1[1]
    assert b[0] == "1B"
    assert b[col["ΔParams (M)"]] == "0.0"
    # soft_ce: mean of the last two logged values, 2.72 (step 9) and 2.70 (step 600)
    assert b[col["Loss"]] == "2.71"
    assert t1[2][col["Loss"]] == "0.23 †"   # no soft_ce logged: the forward KL, flagged
    assert b[col["C4 PPL"]] == "61.9" and b[col["C4 BPB"]] == "0.812"
    assert b[col["C4 word PPL"]] == f"{61.9 ** 1.3:.1f}"
    assert b[col["Wino"]:col["Avg."]] == ["55.6", "72.4", "53.1", "35.2", "62.5", "61.5"]
    assert b[col["Avg."]] == "56.7"         # (55.6+72.4+53.1+35.2+62.5+61.5)/6 = 56.72
    assert t1[3][col["ΔParams (M)"]] == "1.0" and t1[3][col["C4 PPL"]] == "58.9"

    t2 = read_csv(out / "table2.csv")
    # 0.5B has no gated run: its baseline alone is not a Table 2 row; 3B's only run is affine-gated
    assert [r[col["Method"]] for r in t2[1:]] == ["Baseline", "Gated", "Affine-Scaled + Gated",
                                                  "Affine-Scaled + Gated (β/N: visible)"]
    assert t2[2][col["ΔParams (M)"]] == "67.1"
    assert t2[2][col["C4 PPL"]] == "" and t2[2][col["Avg."]] == ""   # no eval, no zero-shot

    t3 = read_csv(out / "table3.csv")
    # affine-gated at the size with both activations (3B's one run is not compared), then the
    # plain-affine pair of that size as labelled extra rows (0.5B's one affine run is not compared)
    assert [(r[0], r[col["Method"]]) for r in t3[1:]] == [
        ("1B", "Affine-Scaled + Gated (α: linear clip)"), ("1B", "Affine-Scaled + Gated (α: sigmoid)"),
        ("1B (extra)", "Affine-Scaled (α: linear clip) ‡"), ("1B (extra)", "Affine-Scaled (α: sigmoid)")]
    t3_md = (out / "table3.md").read_text()
    assert "Table 2's 1B Affine-Scaled + Gated average" in t3_md and "kdtrain's extra" in t3_md

    t4 = {r[2]: r for r in read_csv(out / "table4.csv")[1:]}
    assert t4["base"][3:] == ["9", "13.000", f"{math.sqrt(42):.3f}", "42.000",
                              f"{math.sqrt(42) / 13:.2f}"]
    assert t4["aff"][4:7] == ["1.000", "0.000", "0.000"]
    assert t4["aff-sig"][1] == "Affine-Scaled (α: sigmoid)"
    t5 = {r[2]: r for r in read_csv(out / "table5.csv")[1:]}
    assert t5["base"][3:6] == ["9", "2", "1"]
    assert t5["aff"][4:6] == ["0", "0"]

    md = (out / "table1.md").read_text()
    assert "| 1B | Baseline | base | 0.0 | 2.71 | 61.9 | 0.812 |" in md
    assert "soft cross-entropy" in md and "2048 tokens (stride 2048" in md
    assert "ARC-e test 2,376/2,376" in md and "ARC-e test 5/2,376" in md
    assert "‡ zero-shot on the first 5 items" in md
    # Tables 4/5 name the steps actually used (9 here), not the default 500
    assert (out / "table4.md").read_text().startswith("### Table 4: gradient-norm statistics, steps 1–9")
    index = (out / "index.md").read_text()
    assert index.startswith("# T") and "> smoke" in index and "table3.csv" in index

    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib not installed: figures not checked")
    pngs = {p.name for p in out.glob("*.png")}
    for name in ["fig2_logit_magnitude_1B.png", "fig7_loss_1B.png", "fig8_grad_norm_1B.png",
                 "fig10_loss_late_1B.png", "fig4_first_token_1B.png", "fig6_entropy_1B.png",
                 "fig3_query_mass_1B.png", "fig5_head_heatmap_1B_aff.png",
                 "fig9_attention_map_1B_aff.png", "fig9_attention_map_1B_old.png",
                 "fig11_alpha_activations.png"]:
        assert name in pngs, name
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in index
    assert "column 0 is the sink (old)" in index
    assert "else the first 128 positions of one sequence per step (older runs)" in index and "the paper's quantity (every token" in index


def test_grad_norm_statistic_digits():
    assert report_tables.fmt_stat(0.257) == "0.257" and report_tables.fmt_stat(3.934) == "3.934"
    assert report_tables.fmt_stat(0.0) == "0.000"
    assert report_tables.fmt_stat(0.00028) == "0.00028"   # two significant digits below 0.01
    assert report_tables.fmt_stat(0.0082) == "0.0082" and report_tables.fmt_stat(None) == ""


def test_delta_params_digits_for_tiny_models():
    assert report_tables.fmt_delta_params(0.0) == "0.0"
    assert report_tables.fmt_delta_params(1.048576) == "1.0"
    assert report_tables.fmt_delta_params(0.001024) == "0.0010"    # two significant digits
    assert report_tables.fmt_delta_params(0.000016) == "0.000016"
    assert report_tables.fmt_delta_params(0.016384) == "0.016"
    assert report_tables.fmt_delta_params(None) == ""


def test_resumed_run_keeps_the_last_record_of_a_step(tmp_path):
    run = write_run(tmp_path, "r", "baseline", [3.0, 2.0], [1.0, 2.0], zero_shot=False, ppl=None)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "loss": 1.5, "soft_ce": 4.0, "grad_norm": 5.0}) + "\n")
    r = report.Run(run)
    assert r.series("loss") == ([1, 2], [0.5, 1.5])
    assert r.final_loss(1) == 4.0


def test_bad_metrics_line_names_the_file(tmp_path):
    run = write_run(tmp_path, "r", "baseline", [3.0], [1.0], zero_shot=False, ppl=None)
    with open(run / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
    with pytest.raises(SystemExit, match="metrics.jsonl:3"):
        report.Run(run)


def test_table3_pairs_activations_under_one_divisor_only(tmp_path):
    """A `visible` run beside a `sequence` pair of the same size joins no activation pair:
    Table 3 compares α activations, not divisors."""
    from report_runs import Run

    losses = [3.0, 2.9, 2.8, 2.75, 2.7, 2.71, 2.69, 2.74, 2.72]
    runs = [Run(write_run(tmp_path, name, "affine-gated", losses, [1.0] * 9, alpha=alpha, divisor=divisor))
            for name, alpha, divisor in (("ag", None, "sequence"), ("ag-sig", "sigmoid", "sequence"),
                                         ("ag-vis", None, "visible"))]
    main, extra = report_tables.table3_runs(runs)
    assert [r.name for r in main] == ["ag", "ag-sig"] and extra == []
    # Two activations under different divisors are no pair.
    runs = [Run(write_run(tmp_path, name, "affine", losses, [1.0] * 9, alpha=alpha, divisor=divisor))
            for name, alpha, divisor in (("a", None, "sequence"), ("a-sig-vis", "sigmoid", "visible"))]
    assert report_tables.alpha_pairs(runs, "affine") == []


def test_a_row_reads_its_run_and_the_results_beside_it(tmp_path):
    """scripts/report/study_layout.py: ROW/run holds the run's files, its results lie beside
    it; a folder without run/ (a committed copy from before that layout) is read flat."""
    from report_runs import Run

    losses = [3.0, 2.9, 2.8, 2.75, 2.7, 2.71, 2.69, 2.74, 2.72]
    (tmp_path / "flat").mkdir()
    flat = write_run(tmp_path / "flat", "aff", "affine", losses, [1.0] * 9, analysis=synthetic_analysis())
    (flat / "info.json").write_text(json.dumps({"delta_params": 1234}))
    row = tmp_path / "rows" / "aff"
    (row / "run").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl"):
        (row / "run" / name).write_text((flat / name).read_text())
    for name in ("eval_c4.json", "zero_shot.json", "info.json"):
        (row / name).write_text((flat / name).read_text())
    (row / "analysis").mkdir()
    (row / "analysis" / "analysis.json").write_text((flat / "analysis" / "analysis.json").read_text())
    want = Run(flat)
    for given in (row, row / "run"):
        got = Run(given)
        assert got.name == "aff" and got.path == row
        assert (got.variant, got.metrics, got.eval_c4, got.zero_shot, got.analysis, got.info) == (
            want.variant, want.metrics, want.eval_c4, want.zero_shot, want.analysis, want.info)
        assert got.eval_c4 and got.analysis and got.metrics and got.info == {"delta_params": 1234}
    # The report reads a row and an old flat copy side by side.
    out = tmp_path / "report"
    assert report.main([str(row), str(flat), "--out", str(out), "--no-figures"]) == 0
    assert "rows/aff" in (out / "index.md").read_text() and "flat/aff" in (out / "index.md").read_text()
