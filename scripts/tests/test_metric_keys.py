"""scripts/report/metric_keys.py: which metrics.jsonl keys two bit-identical runs may differ in."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
import metric_keys  # noqa: E402


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_machine_keys():
    for key in ("tokens_per_s", "step_time_s", "peak_memory_bytes", "attn_logit_mean_abs_all_seconds"):
        assert metric_keys.is_machine_key(key)
    for key in ("loss", "grad_norm", "attn_logit_mean_abs_all", "lr", "skipped_steps", "peak_lr"):
        assert not metric_keys.is_machine_key(key)


def test_rows_of_two_identical_runs_compare_equal(tmp_path):
    # The H200 NCCL check of 2026-11-28: single and NCCL runs equal but for the timing of
    # attn_logit_mean_abs_all (KEY_seconds), which the check's old rule compared.
    row = {"step": 19, "loss": 5.5, "grad_norm": 2.68, "attn_logit_mean_abs_all": 0.018}
    a = write_rows(tmp_path / "a.jsonl", [dict(row, step_time_s=0.0017, attn_logit_mean_abs_all_seconds=0.0029)])
    b = write_rows(tmp_path / "b.jsonl", [dict(row, step_time_s=0.0014, attn_logit_mean_abs_all_seconds=0.0027)])
    assert metric_keys.arithmetic_rows(a) == metric_keys.arithmetic_rows(b) == [row]
    c = write_rows(tmp_path / "c.jsonl", [dict(row, grad_norm=2.6772036600496887)])  # the bf16 reduction's
    assert metric_keys.arithmetic_rows(a) != metric_keys.arithmetic_rows(c)
