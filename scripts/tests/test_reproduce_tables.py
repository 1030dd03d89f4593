"""The whole study by one command (`scripts/reproduce.sh --tables`, scripts/report/reproduce_tables.py):
the plan's consistency, the time projection against numbers worked by hand, and a reduced
--smoke run end to end (one teacher, two students of the 1B row, their zero-shot in one
process) with its rerun, which must skip everything, and a resume of an interrupted
student.

The smoke run needs build/kdtrain (or $KDTRAIN_BINARY), ../shared/data and lm_eval / torch /
transformers / matplotlib; it skips cleanly without them.
"""
import csv
import json
import shutil
import subprocess

import pytest

from repo_paths import KDTRAIN, REPO, SHARED, have  # noqa: E402
import project_time  # noqa: E402
import reproduce_tables  # noqa: E402


def test_plan_covers_tables_1_to_3():
    plan = reproduce_tables.load_plan(reproduce_tables.PLAN)
    runs = {(r["size"], r["attention"], tuple(r["set"])) for r in plan["runs"]}
    for size in ("0.5B", "1B", "3B"):
        for v in ("baseline", "sink", "affine"):          # Table 1
            assert (size, v, ()) in runs
    for size in ("1B", "3B"):
        for v in ("gated", "affine-gated"):               # Table 2
            assert (size, v, ()) in runs
    # Table 3 as the paper runs it (affine-gated), and the plain-affine pair as its extra rows
    assert ("1B", "affine-gated", ("attention.alpha_activation=sigmoid",)) in runs
    assert ("1B", "affine", ("attention.alpha_activation=sigmoid",)) in runs
    for size, spec in plan["sizes"].items():
        config = json.loads((REPO / spec["config"]).read_text())
        assert config["attention"]["alpha_activation"] == "linear_clip"     # the paper's
        assert config["attention"]["affine_bias_divisor"] == "sequence"     # the paper's Eq. 8
        assert spec["teacher_preset"] in project_time.PRESETS
    assert [r["name"] for r in reproduce_tables.select(plan, ["1B-sink", "3B"])] == [
        "1B-sink", "3B-baseline", "3B-sink", "3B-affine", "3B-gated", "3B-affine-gated"]
    with pytest.raises(SystemExit, match="not a run or size"):
        reproduce_tables.select(plan, ["2B"])


def test_full_study_refuses_the_shipped_slices(tmp_path):
    """Without --smoke, the shipped half-size slices are refused, each file to fetch named."""
    with pytest.raises(SystemExit) as e:
        reproduce_tables.parse_args(["--out", str(tmp_path), "--teachers", str(tmp_path)])
    msg = str(e.value)
    assert "--smoke" in msg
    for what in ("--fineweb", "--c4", "--eval-data", "ARC-Easy-Test", "hellaswag_val.jsonl",
                 "winogrande", "c4-validation"):
        assert what in msg, what
    # Full files given: no complaint about the data (only, here, the binary the test lacks).
    full = tmp_path / "evals"
    full.mkdir()
    args = ["--out", str(tmp_path), "--teachers", str(tmp_path), "--fineweb", str(tmp_path / "fw.parquet"),
            "--c4", str(tmp_path / "c4.json.gz"), "--eval-data", str(full), "--kdtrain", str(tmp_path / "no")]
    with pytest.raises(SystemExit) as e:
        reproduce_tables.parse_args(args)
    assert "shipped" not in str(e.value)


def test_projection_by_hand():
    # 1B student (Llama-3.2-1B: N = 1,235,814,400 counted params, tied) and its
    # Llama-3.2-3B teacher (N_t = 3,212,749,824), T = 2048:
    #   student 6N + 12*16*32*64*2048 = 7,414,886,400 + 805,306,368 = 8,220,192,768
    #   teacher 2N_t + 4*28*24*128*2048 = 6,425,499,648 + 704,643,072 = 7,130,142,720
    # tokens 9000 * 1024 * 2048 = 18,874,368,000; at MFU 0.5 of 1000 TFLOP/s on 2 GPUs:
    plan = reproduce_tables.load_plan(reproduce_tables.PLAN)
    rows = {r["run"]: r for r in project_time.projection(plan, {"*": 0.5}, 1000.0, 2)}
    r = rows["1B-baseline"]
    flops = 8_220_192_768 + 7_130_142_720
    assert r["tokens"] == 18_874_368_000
    assert r["gflop_per_token"] * 1e9 == pytest.approx(flops, rel=1e-12)
    hours = flops * 18_874_368_000 / (0.5 * 1000e12) / 3600
    assert r["gpu_hours"] == pytest.approx(hours) and r["hours_on_gpus"] == pytest.approx(hours / 2)
    assert project_time.parse_mfu("baseline=0.3,affine=0.25") == {"baseline": 0.3, "affine": 0.25}



def test_mfu_from_bench_files(tmp_path):
    # kdtrain bench --json: one object per run, its "mfu" counts the teacher's FLOPs too.
    one = tmp_path / "affine.json"
    one.write_text(json.dumps({"attention": "affine", "mfu": 0.306, "tokens_per_s": 36742}))
    both = tmp_path / "list.json"
    both.write_text(json.dumps([{"attention": "baseline", "mfu": 0.318}, {"attention": "sink", "mfu": None}]))
    assert project_time.mfu_from_bench([one, both]) == {"affine": 0.306, "baseline": 0.318}
    # docs/gpu/latest.json (scripts/gpu/gpu_report.py): the with-teacher measurement wins where present.
    latest = tmp_path / "latest.json"
    latest.write_text(json.dumps({"commit": "c", "mfu_1b_t2048": {"baseline": 0.30, "affine": 0.29, "gated": None},
                                  "mfu_1b_t2048_with_teacher": {"baseline": 0.33, "affine": None}}))
    assert project_time.mfu_from_bench([latest]) == {"baseline": 0.33, "affine": 0.29}
    rows = {r["variant"]: r for r in project_time.projection(
        reproduce_tables.load_plan(reproduce_tables.PLAN), {"baseline": 0.33}, 989.0, 8)}
    assert rows["baseline"]["gpu_hours"] > 0 and rows["gated"]["gpu_hours"] is None  # not measured
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"mfu_1b_t2048": {"baseline": None}}))
    with pytest.raises(SystemExit, match="no measured MFU"):
        project_time.mfu_from_bench([empty])

needs_smoke = pytest.mark.skipif(
    not (SHARED / "text").is_dir() or not (SHARED / "evals").is_dir()
    or not (SHARED / "tokenizers" / "llama3").is_dir()
    or not have("lm_eval", "torch", "transformers", "tokenizers", "matplotlib")
    or not KDTRAIN.exists(),
    reason="needs ../shared/data, lm_eval/torch/transformers/matplotlib and build/kdtrain")


def tables_cmd(out, *extra):
    return ["bash", str(REPO / "scripts" / "reproduce.sh"), "--tables", "--smoke", "--out", str(out),
            "--kdtrain", str(KDTRAIN), "--only", "1B-baseline", "1B-affine-gated", *extra]


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@needs_smoke
def test_smoke_study_reduced_end_to_end(tmp_path):
    out = tmp_path / "study"
    proc = subprocess.run(tables_cmd(out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    teacher = out / "teachers" / "1B"
    assert (teacher / "checkpoints" / "latest").read_text().strip() == "step_00000006"
    for name, variant in (("1B-baseline", "baseline"), ("1B-affine-gated", "affine-gated")):
        run = out / "runs" / name  # the row: the run in run/, its results beside it (study_layout.py)
        assert {p.name for p in (run / "run").iterdir()} <= {"config.json", "metrics.jsonl", "checkpoints",
                                                              "kdtrain.lock"}
        cfg = json.loads((run / "run" / "config.json").read_text())
        assert cfg["attention"]["variant"] == variant
        assert cfg["model"]["vocab_size"] == 128256 and cfg["train"]["steps"] == 6
        assert cfg["optimizer"]["lr"] == 1e-3          # the paper config's own hyperparameters
        last = json.loads((run / "run" / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["soft_ce"] > last["kd"] > 0          # soft CE = KL + teacher entropy
        c4 = json.loads((run / "eval_c4.json").read_text())
        assert c4["bits_per_byte"] > 0 and c4["data_manifest"]["documents"] == 1000
        assert c4["word_perplexity"] > c4["perplexity"] and c4["words"] < c4["tokens"]
        assert c4["windows"] == 8 and c4["seq_len"] == 64
        zs = json.loads((run / "zero_shot.json").read_text())
        assert zs["limit"] == 2
        assert zs["tasks"]["arc_challenge"]["split"] == "test"
        assert zs["tasks"]["arc_easy"]["official_split"] is False   # only validation is shipped
        analysis = json.loads((run / "analysis" / "analysis.json").read_text())
        assert "query_mass_excl_first" in analysis and "query_weight_sum" in analysis
        assert json.loads((run / "study_row.json").read_text())["size"] == "1B"
    report = out / "report"
    for n in range(1, 6):
        assert (report / f"table{n}.md").is_file() and (report / f"table{n}.csv").is_file()
    index = (report / "index.md").read_text()
    assert "SMOKE RUN" in index
    figs = {p.name for p in report.glob("fig*.png")}
    for n in (2, 3, 4, 6, 7, 8, 10):
        assert any(f.startswith(f"fig{n}_") for f in figs), n
    assert ("fig5_head_heatmap_1B_1B-affine-gated.png" in figs
            and "fig9_attention_map_1B_1B-affine-gated.png" in figs)
    rows = read_csv(report / "table2.csv")
    assert [(r["Run"], r["Method"]) for r in rows] == [("1B-baseline", "Baseline ‡"),
                                                      ("1B-affine-gated", "Affine-Scaled + Gated ‡")]
    assert all(r["Loss"] and r["C4 PPL"] and r["C4 BPB"] and r["C4 word PPL"] and r["Avg."] for r in rows)
    assert (report / "table4.md").read_text().startswith("### Table 4: gradient-norm statistics, steps 1–6")
    assert [r["Method"] for r in read_csv(report / "table3.csv")] == ["Affine-Scaled + Gated (α: linear clip) ‡"]

    # A rerun skips every finished stage (the figures were checked above: tables only from here).
    again = subprocess.run(tables_cmd(out, "--no-figures"), cwd=REPO, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "teacher 1B: done already" in again.stdout
    assert "train: skipped" in again.stdout and "zero-shot: skipped, every run has" in again.stdout
    assert "train: resuming" not in again.stdout

    # An interrupted student resumes from its last checkpoint and ends bit-identical.
    run = out / "runs" / "1B-affine-gated"
    before = json.loads((run / "eval_c4.json").read_text())
    shutil.rmtree(run / "run" / "checkpoints" / "step_00000006")
    (run / "run" / "checkpoints" / "latest").write_text("step_00000003\n")
    (run / "eval_c4.json").unlink()
    (run / "zero_shot.json").unlink()
    resumed = subprocess.run(tables_cmd(out, "--no-figures"), cwd=REPO, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "train: resuming" in resumed.stdout
    # the batched zero-shot stage redoes only the run that lacks its zero_shot.json
    assert "zero-shot (six tasks) for 1 run(s): 1B-affine-gated" in resumed.stdout
    assert json.loads((run / "zero_shot.json").read_text())["limit"] == 2
    after = json.loads((run / "eval_c4.json").read_text())
    assert after["ce_sum"] == before["ce_sum"]

    # The same run directory asked for something else is refused, not mixed in.
    other = subprocess.run(tables_cmd(out, "--set", "train.seed=7"), cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    assert other.returncode != 0
    assert "reproduce_stamp differs" in other.stdout + other.stderr
