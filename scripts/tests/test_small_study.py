"""The small study: the byte-level tokenizer (scripts/data/make_byte_tokenizer.py) and a
smoke run of scripts/small_study.sh end to end.

The tokenizer must map text to exactly the ids kdtrain's byte corpora use
(id = byte value, vocabulary 256), in `tokenizers` and through transformers'
AutoTokenizer (what lm-eval loads), and prepare_fineweb_edu.py with it must write
the text's bytes plus the newline separator.

The smoke run (`small_study.sh --smoke`: 5 steps per run, `--limit 2` zero-shot,
3 variants to keep it short) needs build/kdtrain (or $KDTRAIN_BINARY),
../shared/data and lm_eval; it skips cleanly without them.
"""
import csv
import hashlib
import json
import os
import random
import subprocess
import sys

import pytest

from repo_paths import KDTRAIN, REPO, SHARED, have  # noqa: E402


needs_tokenizers = pytest.mark.skipif(not have("tokenizers"), reason="tokenizers not installed")


def sample_texts():
    rng = random.Random(7)
    texts = ["", "a", "Hello, world!", " leading and trailing spaces  ", "tabs\tand\nnew\r\nlines",
             "Über café naïve — “quotes” 日本語 한국어 🙂🚀", "\x00\x01\x7f control bytes",
             "".join(chr(c) for c in range(256)),  # every Latin-1 code point (1-2 UTF-8 bytes)
             "Question: Which gas do plants absorb?\nAnswer: carbon dioxide"]
    pools = [range(32, 127), range(0, 0x800), range(0x800, 0x3000), range(0x1F300, 0x1F600)]
    for _ in range(50):
        pool = rng.choice(pools)
        texts.append("".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 60))))
    return texts


@needs_tokenizers
def test_byte_tokenizer_ids_are_the_bytes(tmp_path):
    import make_byte_tokenizer as mbt
    from tokenizers import Tokenizer

    mbt.write(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 256
    vocab = tok.get_vocab(with_added_tokens=True)
    assert sorted(vocab.values()) == list(range(256))
    for text in sample_texts():
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == list(text.encode("utf-8")), text
        assert tok.decode(ids) == text
    # a single byte id decodes to that byte (for ASCII, to the character itself)
    for b in range(128):
        assert tok.decode([b]) == chr(b)


@pytest.mark.skipif(not have("tokenizers", "transformers"), reason="transformers not installed")
def test_byte_tokenizer_through_autotokenizer(tmp_path):
    import make_byte_tokenizer as mbt
    from transformers import AutoTokenizer

    mbt.write(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(tok) == 256
    assert tok.eos_token_id == 10 and tok.pad_token_id == 10 and tok.bos_token_id is None
    for text in sample_texts():
        assert tok(text)["input_ids"] == list(text.encode("utf-8"))  # no BOS/EOS added
        assert tok.decode(list(text.encode("utf-8"))) == text


@needs_tokenizers
def test_prepare_with_byte_tokenizer_writes_bytes(tmp_path):
    import numpy as np
    import make_byte_tokenizer as mbt

    mbt.write(tmp_path / "tok")
    docs = ["First document.\nWith two lines.", "Zweites Dokument: Größe ✓", "third"]
    src = tmp_path / "docs.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        for i, d in enumerate(docs):
            w.writerow([i, d])
    sep = mbt.byte_alphabet()[mbt.NEWLINE]
    subprocess.run([sys.executable, str(REPO / "scripts" / "data" / "prepare_fineweb_edu.py"),
                    "--tokenizer", str(tmp_path / "tok"), "--input", str(src),
                    "--out", str(tmp_path / "shards"), "--val-tokens", "0", "--quiet",
                    "--separator", sep, "--separator-position", "after"], check=True)
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert manifest["vocab_size"] == 256 and manifest["dtype"] == "uint16"
    assert manifest["separator"]["id"] == 10
    shard = tmp_path / "shards" / manifest["shards"][0]["file"]
    tokens = np.fromfile(shard, dtype="<u2", offset=256 * 4)
    want = b"".join(d.encode("utf-8") + b"\n" for d in docs)
    assert tokens.tolist() == list(want)


def stamp(config, *lines):
    """small_study.sh's stamp_of: sha256 of the config file's bytes, then one line per argument."""
    text = (REPO / config).read_bytes() + "".join(f"{x}\n" for x in lines).encode()
    return hashlib.sha256(text).hexdigest()


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def check_flat_rows_migrate(out, variants):
    """A study made before the run/ layout (OUT/runs/NAME holding the run's files and its
    results side by side, students stamped with the teacher at runs/teacher/checkpoints)
    is migrated by the rerun, which then finds every run finished."""
    common = ["--set", f"data.train={out}/data/fineweb_edu/fineweb_edu_train_*.bin",
              "--set", f"data.val={out}/data/fineweb_edu/fineweb_edu_val_*.bin", "--set", "train.device=cpu",
              "--set", "train.steps=5", "--set", "schedule.warmup=1", "--set", "train.global_batch=4",
              "--set", "train.micro_batch=4"]
    teacher_stamp = stamp("configs/study/cpu-teacher.json", *common)
    assert (out / "runs" / "teacher" / "study_stamp").read_text().strip() == teacher_stamp

    def sink_stamp(teacher):
        return stamp("configs/study/cpu-student.json", "--attention", "sink", *common,
                     "--set", f"kd.teacher={teacher}/checkpoints/step_00000005", f"teacher {teacher_stamp}")
    sink = out / "runs" / "sink"
    assert (sink / "study_stamp").read_text().strip() == sink_stamp(out / "runs" / "teacher" / "run")
    for name in ("teacher", "sink"):  # the layout before run/
        row = out / "runs" / name
        for p in (row / "run").iterdir():
            os.rename(p, row / p.name)
        (row / "run").rmdir()
    (sink / "study_stamp").write_text(sink_stamp(out / "runs" / "teacher") + "\n")
    runs_before = {name: tree(out / "runs" / name) for name in ("teacher", "sink")}
    again = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--smoke", "--out", str(out),
                            "--kdtrain", str(KDTRAIN), "--variants", " ".join(variants)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{out}/runs/sink: moved checkpoints, config.json, kdtrain.lock, metrics.jsonl" in again.stderr
    assert "teacher: train: done already" in again.stdout
    assert "sink: train (KD from teacher): done already" in again.stdout
    assert "sink: zero-shot: done already" in again.stdout
    for name, before in runs_before.items():
        after = tree(out / "runs" / name)
        for rel, content in before.items():  # every run file moved into run/ unchanged, every result kept
            moved = "run/" + rel if rel.split("/")[0] in ("kdtrain.lock", "config.json", "metrics.jsonl",
                                                           "checkpoints") else rel
            assert rel == "study_stamp" or after[moved] == content, (name, rel)
    # the student's stamp is now the one of its teacher's new place
    assert (sink / "study_stamp").read_text().strip() == sink_stamp(out / "runs" / "teacher" / "run")


needs_study = pytest.mark.skipif(
    not (SHARED / "text").is_dir() or not (SHARED / "evals").is_dir()
    or not have("lm_eval", "torch", "transformers", "tokenizers", "matplotlib")
    or not KDTRAIN.exists(),
    reason="needs ../shared/data, lm_eval/torch/transformers/matplotlib and build/kdtrain")


@pytest.mark.skipif(not KDTRAIN.exists(), reason="needs build/kdtrain")
@pytest.mark.parametrize("divisors,affine_runs", [
    ("sequence visible", ["affine affine sequence", "affine-visible affine visible"]),
    ("visible sequence", ["affine-visible affine visible", "affine affine sequence"]),
    ("visible", ["affine-visible affine visible"]),  # never the sequence run's name
])
def test_small_study_run_names_follow_the_divisor(divisors, affine_runs):
    proc = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--list-runs", "--kdtrain",
                           str(KDTRAIN), "--variants", "baseline affine", "--affine-divisors", divisors],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["teacher teacher -", "baseline baseline -"] + affine_runs


@needs_study
def test_small_study_smoke_end_to_end(tmp_path):
    out = tmp_path / "study"
    variants = ["baseline", "sink", "affine"]
    proc = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--smoke",
                           "--out", str(out), "--kdtrain", str(KDTRAIN),
                           "--variants", " ".join(variants)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # each row is runs/NAME: the run in run/, its results beside it (study_layout.py)
    teacher = out / "runs" / "teacher"
    assert (teacher / "run" / "checkpoints" / "latest").read_text().strip() == "step_00000005"
    assert json.loads((teacher / "eval_c4.json").read_text())["perplexity"] > 1
    # the affine variant trains once per divisor (the CPU default, "sequence visible")
    runs = {"baseline": ("baseline", None), "sink": ("sink", None), "affine": ("affine", "sequence"),
            "affine-visible": ("affine", "visible")}
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted([*runs, "teacher"])
    for name, (variant, divisor) in runs.items():
        run = out / "runs" / name
        # nothing derived inside the run directory: only `kdtrain train` writes there
        assert not {"eval_c4.json", "zero_shot.json", "analysis", "hf", "info.json", "study_stamp"} & {
            p.name for p in (run / "run").iterdir()}
        assert (run / "info.json").is_file() and (run / "study_stamp").is_file()
        cfg = json.loads((run / "run" / "config.json").read_text())
        assert cfg["attention"]["variant"] == variant
        if divisor:
            assert cfg["attention"]["affine_bias_divisor"] == divisor
        assert cfg["kd"]["teacher"].endswith("runs/teacher/run/checkpoints/step_00000005")
        assert json.loads((run / "eval_c4.json").read_text())["perplexity"] > 1
        zs = json.loads((run / "zero_shot.json").read_text())
        assert zs["limit"] == 2 and len(zs["tasks"]) == 6
        assert (run / "analysis" / "analysis.json").is_file()
        assert (run / "hf" / "tokenizer.json").is_file()
    report = out / "report"
    for name in ["index.md", "table1.md", "table1.csv", "table3.md", "table4.md", "table5.md"]:
        assert (report / name).is_file(), name
    assert list(report.glob("fig*.png"))
    with open(report / "table1.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["Method"] for r in rows] == ["Baseline ‡", "Sink ‡", "Affine-Scaled ‡",  # --limit 2
                                           "Affine-Scaled (β/N: visible) ‡"]
    assert all(r["C4 PPL"] and r["C4 BPB"] and r["Loss"] for r in rows)
    assert "steps 1–5" in (report / "table4.md").read_text()
    # the per-run summary the results README quotes
    summary = tmp_path / "summary.csv"
    made = subprocess.run([sys.executable, str(REPO / "scripts" / "report" / "study_summary.py"),
                           *[str(out / "runs" / name) for name in runs], "--out", str(summary)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    with open(summary, newline="", encoding="utf-8") as f:
        table = {r["run"]: r for r in csv.DictReader(f)}
    assert list(table) == ["baseline", "sink", "affine", "affine-visible"]
    for name, (_, divisor) in runs.items():
        row = table[name]
        assert row["divisor"] == (divisor or "")
        c4 = json.loads((out / "runs" / name / "eval_c4.json").read_text())
        assert abs(float(row["c4_ppl"]) / c4["perplexity"] - 1) < 1e-5  # printed to 6 digits
        assert row["steps"] == "5" and row["weight_sum_mean"] and row["first_token_w"] and row["val_kd"]
    assert abs(float(table["baseline"]["weight_sum_mean"]) - 1) < 1e-5  # softmax rows sum to one
    # a rerun skips every finished stage
    again = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--smoke",
                            "--out", str(out), "--kdtrain", str(KDTRAIN),
                            "--variants", " ".join(variants)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "teacher: train: done already" in again.stdout
    assert "affine: zero-shot: done already" in again.stdout
    assert "affine-visible: zero-shot: done already" in again.stdout
    check_flat_rows_migrate(out, variants)
    bad = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--smoke", "--out", str(out),
                          "--kdtrain", str(KDTRAIN), "--affine-divisors", "sequence keys"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown affine bias divisor 'keys' (choices: sequence, visible)" in bad.stderr
    # a changed student override redoes that student (and its evaluations), not the teacher
    before = (out / "runs" / "affine" / "run" / "metrics.jsonl").read_text()
    changed = subprocess.run(["bash", str(REPO / "scripts" / "small_study.sh"), "--smoke",
                              "--out", str(out), "--kdtrain", str(KDTRAIN), "--variants", "affine",
                              "--affine-divisors", "sequence", "--student-set", "train.seed=9"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "teacher: train: done already" in changed.stdout
    assert "affine: train (KD from teacher): done already" not in changed.stdout
    assert "affine: zero-shot: done already" not in changed.stdout
    cfg = json.loads((out / "runs" / "affine" / "run" / "config.json").read_text())
    assert cfg["train"]["seed"] == 9
    assert (out / "runs" / "affine" / "run" / "metrics.jsonl").read_text() != before
    # the replaced row is set aside whole, never deleted
    kept = sorted((out / "superseded").glob("affine.*"))
    assert len(kept) == 1, kept
    assert (kept[0] / "run" / "metrics.jsonl").read_text() == before
    assert (kept[0] / "eval_c4.json").is_file() and "the old row is kept in" in changed.stdout
