"""scripts/peers/bench_attention.py runs on CPU with tiny shapes and states its FLOP convention."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_attention  # noqa: E402


def test_flop_convention():
    # causal fwd 4*B*H*T^2*D/2, fwd+bwd 3.5x
    assert bench_attention.fwd_bwd_flops(2, 3, 8, 4) == 3.5 * 4 * 2 * 3 * 64 * 4 / 2


def test_cpu_smoke():
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers" / "bench_attention.py"), "--device", "cpu",
                        "--tokens", "64", "--seq-len", "32", "--head-dims", "16", "--channels", "64",
                        "--warmup", "0", "--iters", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    cases = {x["case"] for x in r["results"]}
    assert "sdpa" in cases
    assert {f"{v}-eager" for v in bench_attention.VARIANTS} <= cases
    for x in r["results"]:
        assert "error" not in x, x
        assert x["ms"] > 0 and x["tflops"] > 0 and "slowdown_vs_sdpa" in x


def test_with_kdtrain_attention_only():
    pytest.importorskip("torch")
    import os
    kdtrain = Path(os.environ.get("KDTRAIN_BINARY", ROOT / os.environ.get("KDTRAIN_BUILD_DIR", "build") / "kdtrain"))
    if not kdtrain.exists():
        pytest.skip(f"{kdtrain} not built")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers" / "bench_attention.py"), "--device", "cpu",
                        "--tokens", "64", "--seq-len", "32", "--head-dims", "16", "--channels", "64",
                        "--gqa", "2", "--warmup", "0", "--iters", "1", "--kdtrain", str(kdtrain),
                        "--kdtrain-preset", "tiny-llama", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if any("error" in x and "attention-only" in x["error"] for x in r["kdtrain"]):
        pytest.skip("this kdtrain has no --attention-only")
    assert [x["attention"] for x in r["kdtrain"]] == list(bench_attention.VARIANTS)
    for x in r["kdtrain"]:
        assert (x["H"], x["Hkv"], x["D"], x["B"], x["T"]) == (4, 2, 16, 2, 32)
        assert "warning" not in x
        # same FLOP convention on both sides
        assert x["flops_fwd_bwd"] == bench_attention.fwd_bwd_flops(2, 4, 32, 16)
    assert set(r["attn_fwdbwd_vs_sdpa"]) == {"16"}
    assert r["variant_attn_slowdown"]["16"]["baseline"] == 1.0
