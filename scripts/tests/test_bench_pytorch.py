"""scripts/peers/bench_pytorch.py: runs every variant on CPU with tiny shapes, and its
preset table and FLOP formula agree with kdtrain (`info --json`, `bench --json`)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "peers" / "bench_pytorch.py"
from repo_paths import KDTRAIN  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import bench_pytorch  # noqa: E402

VARIANTS = bench_pytorch.VARIANTS


def last_json(out):
    """The JSON object in the output: one line (bench) or pretty-printed (info)."""
    for line in reversed(out.splitlines()):
        if line.startswith("{") and line.rstrip().endswith("}"):
            return json.loads(line)
    start = out.find("\n{") + 1 if not out.startswith("{") else 0
    if out[start:start + 1] != "{":
        raise AssertionError("no JSON object in output:\n" + out)
    return json.JSONDecoder().raw_decode(out[start:])[0]


def run_torch(*extra):
    cmd = [sys.executable, str(SCRIPT), "--preset", "tiny-llama", "--device", "cpu",
           "--micro-batch", "2", "--seq-len", "32", "--steps", "2", "--warmup", "1",
           "--threads", "1", "--json", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return last_json(p.stdout)


def kdtrain(*args):
    if not KDTRAIN.exists():
        pytest.skip(f"{KDTRAIN} not built")
    p = subprocess.run([str(KDTRAIN), *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and "bench" in args[:1] and "required" in (p.stdout + p.stderr):
        pytest.skip("this kdtrain has no bench subcommand")
    assert p.returncode == 0, p.stdout + p.stderr
    return last_json(p.stdout)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_runs_on_cpu(variant):
    pytest.importorskip("torch")
    r = run_torch("--attention", variant)
    assert r["attention"] == variant
    assert r["tokens_per_step"] == 64
    assert r["tokens_per_s"] > 0 and r["step_ms"] > 0
    assert r["mfu"] is None  # no peak on cpu
    assert r["final_loss"] == pytest.approx(r["final_loss"])  # finite (not NaN)
    assert r["flops_per_token"]["student_train"] == bench_pytorch.student_train_flops_per_token(
        bench_pytorch.PRESETS["tiny-llama"], variant, 32)


def test_teacher_and_peak():
    pytest.importorskip("torch")
    r = run_torch("--attention", "gated", "--teacher", "tiny-llama", "--peak-tflops", "1")
    assert r["flops_per_token"]["teacher_forward"] > 0
    assert r["mfu"] == pytest.approx(r["achieved_tflops"])


def test_flop_params_by_hand():
    cfg = bench_pytorch.PRESETS["tiny-llama"]
    per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176 + 128
    assert bench_pytorch.flop_params(cfg, "baseline") == 2 * per_layer + 64 + 256 * 64
    assert bench_pytorch.flop_params(cfg, "gated") == 2 * (per_layer + 64 * 64) + 64 + 256 * 64
    assert bench_pytorch.student_train_flops_per_token(cfg, "baseline", 32) == \
        6 * bench_pytorch.flop_params(cfg, "baseline") + 12 * 2 * 4 * 16 * 32


@pytest.mark.parametrize("preset", sorted(bench_pytorch.PRESETS))
def test_presets_match_kdtrain_info(preset):
    info = kdtrain("info", "--preset", preset, "--json")
    arch = info["architecture"]
    mine = bench_pytorch.PRESETS[preset]
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta",
                "attention_bias", "tie_word_embeddings", "family"):
        assert mine[key] == arch[key], key
    assert mine["rope_type"] == arch["rope_scaling"]["type"]
    if mine["rope_type"] == "llama3":
        rs = arch["rope_scaling"]
        assert mine["rope_factor"] == rs["factor"]
        assert mine["low_freq_factor"] == rs["low_freq_factor"]
        assert mine["high_freq_factor"] == rs["high_freq_factor"]
        assert mine["original_max_position_embeddings"] == rs["original_max_position_embeddings"]
    # trainable total: the FLOP count equals it for tied models
    if mine["tie_word_embeddings"]:
        assert bench_pytorch.flop_params(mine, "baseline") == info["baseline_params"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen"])
def test_flops_match_kdtrain_bench(preset, variant):
    k = kdtrain("bench", "--preset", preset, "--attention", variant, "--device", "cpu",
                "--micro-batch", "1", "--seq-len", "16", "--steps", "1", "--warmup", "0",
                "--teacher", "tiny-llama" if preset == "tiny-llama" else "tiny-qwen", "--json")
    cfg = bench_pytorch.PRESETS[preset]
    assert k["params_flop"] == bench_pytorch.flop_params(cfg, variant)
    assert k["flops_per_token"]["student_train"] == pytest.approx(
        bench_pytorch.student_train_flops_per_token(cfg, variant, 16), rel=1e-12)
    assert k["flops_per_token"]["teacher_forward"] == pytest.approx(
        bench_pytorch.teacher_forward_flops_per_token(cfg, 16), rel=1e-12)
