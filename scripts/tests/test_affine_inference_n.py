"""scripts/report/affine_inference_n.py on two tiny affine runs trained by build/kdtrain:
one with the `visible` divisor, where the inference N cannot matter, and one with the
`sequence` divisor, where N = keys differs from N = train length only at a length shorter
than the training length (docs/model.md, "The affine divisor at inference").

The zero-shot half (`--no-zero-shot` here) needs lm_eval and minutes; test_zero_shot.py
covers run_zero_shot.py.
"""
import csv
import json
import subprocess
import sys

import pytest

from repo_paths import KDTRAIN, REPO  # noqa: E402
from test_row_migration import tiny_train, write_shard  # noqa: E402

pytestmark = pytest.mark.skipif(not KDTRAIN.exists(), reason=f"{KDTRAIN} not built")
SCRIPT = REPO / "scripts" / "report" / "affine_inference_n.py"
TRAIN_LEN, SHORT = 32, 12
QUANTITIES = ["c4_ppl", "fig3_weight_sum_mean", "fig3_weight_sum_median", "fig3_weight_sum_min",
              "fig3_weight_sum_max", "fig4_first_token_weight", "fig5_head_mass_mean", "fig6_entropy",
              "alpha_mean", "fig5_head_mass_max_cell_change"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    base = tmp_path_factory.mktemp("affine_n")
    shard = write_shard(base / "data" / "c4_val_0.bin", n=8000)
    for name, divisor in (("vis", "visible"), ("seq", "sequence")):
        tiny_train(shard, base / "rows" / name / "run", "--attention", "affine",
                   "--set", f"attention.affine_bias_divisor={divisor}", "--set", "train.steps=3")
    tok = base / "tok"
    subprocess.run([sys.executable, str(REPO / "scripts" / "data" / "make_byte_tokenizer.py"), "--out", str(tok)],
                   check=True, capture_output=True)
    out = base / "out"
    # one run named by its row, one by its run directory (study_layout.Row reads both)
    cmd = [sys.executable, str(SCRIPT), str(base / "rows" / "vis"), str(base / "rows" / "seq" / "run"),
           "--c4", str(base / "data" / "c4_val_*.bin"), "--tokenizer", str(tok), "--out", str(out),
           "--seq-lens", str(TRAIN_LEN), str(SHORT), "--max-windows", "4", "--num-seqs", "2",
           "--kdtrain", str(KDTRAIN), "--no-zero-shot"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "affine_n.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    table = {(r["run"], r["quantity"], int(r["seq_len"])): r for r in rows}
    return {"out": out, "cmd": cmd, "stdout": proc.stdout, "rows": rows, "table": table}


def test_files_and_columns(measured):
    out = measured["out"]
    assert list(measured["rows"][0]) == ["run", "quantity", "seq_len", "train_length", "keys", "change"]
    for run in ("vis", "seq"):
        for n in ("train_length", "keys"):
            for length in (TRAIN_LEN, SHORT):
                ev = json.loads((out / run / n / f"eval_c4_{length}.json").read_text())
                assert ev["seq_len"] == length and ev["perplexity"] > 1
                assert (out / run / n / f"analysis_{length}" / "analysis.json").is_file()
            assert not (out / run / n / "hf").exists()  # --no-zero-shot
    # every quantity at both lengths for both runs, nothing else
    assert sorted(measured["table"]) == sorted((run, q, length) for run in ("vis", "seq")
                                               for q in QUANTITIES for length in (TRAIN_LEN, SHORT))
    table = [line for line in measured["stdout"].splitlines() if line.startswith("|")]  # after kdtrain's output
    assert table[0] == "| run | quantity | seq len | N = train length | N = keys | change |"
    assert len(table) == 2 + len(measured["rows"])


def test_values(measured):
    t = measured["table"]
    for (run, q, length), r in t.items():
        if q == "fig5_head_mass_max_cell_change":
            assert r["train_length"] == r["keys"] == "" and float(r["change"]) >= 0
            continue
        a, b = float(r["train_length"]), float(r["keys"])
        assert float(r["change"]) == pytest.approx(a - b, abs=1e-12)
        if q == "c4_ppl":
            assert a > 1 and b > 1
    # visible: N is each query's visible count whatever --affine-n says: identical numbers
    for (run, q, length), r in t.items():
        if run == "vis" or length == TRAIN_LEN:  # sequence at the training length: N agrees by construction
            assert float(r["change"]) == 0, (run, q, length)
    # sequence, shorter than trained: N = keys scales the affine term differently
    assert float(t[("seq", "c4_ppl", SHORT)]["change"]) != 0
    assert float(t[("seq", "fig5_head_mass_max_cell_change", SHORT)]["change"]) > 0


def test_a_rerun_skips_every_finished_step(measured):
    before = (measured["out"] / "affine_n.csv").read_text()
    again = subprocess.run(measured["cmd"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "+ " not in again.stderr  # no kdtrain command ran
    assert (measured["out"] / "affine_n.csv").read_text() == before
