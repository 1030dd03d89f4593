"""scripts/peers/bench_attention.py runs on CPU with tiny shapes and states its FLOP convention."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_attention  # noqa: E402
from repo_paths import KDTRAIN  # noqa: E402


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
    kdtrain = KDTRAIN
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
        assert x["kernel_ms"] == {}  # asked for; the CPU backend has no timed launches
    assert set(r["attn_fwdbwd_vs_sdpa"]) == {"16"}
    assert r["variant_attn_slowdown"]["16"]["baseline"] == 1.0


def test_build_specs():
    assert bench_attention.parse_build("atomic-dq=/p/kdtrain_atomic_dq") == ("atomic-dq", "/p/kdtrain_atomic_dq", {}, [])
    assert bench_attention.parse_build("env:x=SOME_VAR=x /p/kdtrain") == ("env:x", "/p/kdtrain", {"SOME_VAR": "x"}, [])
    assert bench_attention.parse_build("train.attention_backward:wgmma=/p/kdtrain --set train.attention_backward=wgmma") \
        == ("train.attention_backward:wgmma", "/p/kdtrain", {}, ["--set", "train.attention_backward=wgmma"])
    with pytest.raises(SystemExit):
        bench_attention.parse_build("label=A=1")


def test_ratios_of_any_subset_of_rows():
    rows = [{"kind": "kdtrain", "attention": "baseline", "D": 64, "fwd_bwd_ms": 2.0},
            {"kind": "torch", "case": "sdpa", "variant": "baseline", "D": 64, "ms": 2.5}]
    r = bench_attention.summarize(rows)
    assert r["attn_fwdbwd_vs_sdpa"] == {"64": 1.25} and r["attn_determinism_cost"] == {}
    rows += [{"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "atomic-dq", "fwd_bwd_ms": 1.6},
             {"kind": "kdtrain", "attention": "sink", "D": 64, "fwd_bwd_ms": 2.2},
             {"kind": "torch", "case": "sink+compile", "variant": "sink", "D": 64, "ms": 4.4},
             {"kind": "kdtrain", "variant": "gated", "D": 64, "error": "x"}]
    r = bench_attention.summarize(rows)
    assert r["attn_determinism_cost"] == {"64": pytest.approx(0.25)} and r["attn_determinism_cost_by_choice"] == {}
    choice = "train.attention_backward:wgmma"
    rows += [{"kind": "kdtrain", "attention": "baseline", "D": 64, "build": choice, "fwd_bwd_ms": 1.5},
             {"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "atomic-dq+" + choice, "fwd_bwd_ms": 1.2},
             {"kind": "kdtrain", "attention": "baseline", "D": 128, "build": "atomic-dq+" + choice, "fwd_bwd_ms": 1.0}]
    r = bench_attention.summarize(rows)  # D 128 has no deterministic row of the choice: no ratio
    assert r["attn_determinism_cost_by_choice"] == {"64": {choice: pytest.approx(0.25)}}
    assert r["attn_determinism_cost"] == {"64": pytest.approx(0.25)}
    assert r["variant_attn_slowdown"] == {"64": {"baseline": 1.0, "sink": pytest.approx(1.1)}}
    assert r["variant_speedup_vs_torch_best"] == {"64": {"sink": pytest.approx(2.0)}}
    assert rows[1]["slowdown_vs_sdpa"] == 1.0 and rows[4]["slowdown_vs_sdpa"] == pytest.approx(1.76)
    # SDPA under PyTorch's own backend choice, when faster than the flash backend, is the
    # reference (and the best PyTorch baseline).
    rows.append({"kind": "torch", "case": "sdpa-dispatch", "variant": "baseline", "D": 64, "ms": 1.8})
    r = bench_attention.summarize(rows)
    assert r["attn_fwdbwd_vs_sdpa"] == {"64": pytest.approx(0.9)}
    assert r["variant_speedup_vs_torch_best"]["64"]["baseline"] == pytest.approx(0.9)
    assert rows[1]["slowdown_vs_sdpa"] == pytest.approx(2.5 / 1.8)


def fake_kdtrain(tmp_path):
    """A kdtrain that answers `bench --attention-only` at once (ms from the environment)."""
    script = tmp_path / "kdtrain"
    script.write_text("#!/usr/bin/env python3\n"
                      "import json, os, sys\n"
                      "a = sys.argv\n"
                      "v, D = a[a.index('--attention') + 1], int(a[a.index('--head-dim') + 1])\n"
                      "ms = float(os.environ.get('FAKE_MS', '1.0'))\n"
                      "r = {'attention': v, 'D': D, 'H': 64 // D, 'Hkv': 1, 'forward_ms': ms / 4,\n"
                      "     'backward_ms': 3 * ms / 4, 'fwd_bwd_ms': ms, 'args': a[1:]}\n"
                      "if '--kernel-times' in a:\n"
                      "    if os.environ.get('FAKE_OLD'):  # a kdtrain from before the flag: CLI11's refusal\n"
                      "        sys.exit('The following argument was not expected: --kernel-times')\n"
                      "    r['kernel_ms'] = {'bwd_main': ms / 2, 'fwd wgmma': ms / 5}\n"
                      "print(json.dumps(r))\n")
    script.chmod(0o755)
    return script


def test_rows_are_written_as_measured_in_order_of_value(tmp_path):
    pytest.importorskip("torch")
    kd = fake_kdtrain(tmp_path)
    out = tmp_path / "rows.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers" / "bench_attention.py"), "--device", "cpu",
                        "--tokens", "64", "--seq-len", "32", "--head-dims", "16", "32", "--channels", "64",
                        "--warmup", "0", "--iters", "1", "--cases", "strong", "--variants", "baseline", "gated",
                        "--kdtrain", str(kd), "--kdtrain-build", f"atomic-dq=FAKE_MS=0.8 {kd}",
                        "--kdtrain-build", f"choice:x={kd} --set a.b=x", "--jsonl", str(out), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    order = [(r["kind"], r.get("case") or r.get("build") or r["attention"], r["D"]) for r in rows]
    assert order[:12] == [("kdtrain", "baseline", 16), ("torch", "sdpa", 16), ("torch", "sdpa-dispatch", 16),
                          ("kdtrain", "baseline", 32), ("torch", "sdpa", 32), ("torch", "sdpa-dispatch", 32),
                          ("kdtrain", "gated", 16), ("kdtrain", "gated", 32),
                          ("kdtrain", "atomic-dq", 16), ("kdtrain", "atomic-dq", 32),
                          ("kdtrain", "choice:x", 16), ("kdtrain", "choice:x", 32)]
    assert {o[0] for o in order[12:]} == {"torch"}
    assert rows[10]["args"][-2:] == ["--set", "a.b=x"]
    # Every kdtrain row asks for the per-kernel times and keeps them.
    for r in (r for r in rows if r["kind"] == "kdtrain"):
        assert "--kernel-times" in r["args"]
        assert r["kernel_ms"] == {"bwd_main": pytest.approx(r["fwd_bwd_ms"] / 2),
                                  "fwd wgmma": pytest.approx(r["fwd_bwd_ms"] / 5)}
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["attn_determinism_cost"] == {"16": pytest.approx(0.25), "32": pytest.approx(0.25)}


def test_kernel_times_kept_and_an_older_kdtrain_still_measured(tmp_path):
    import argparse
    kd = str(fake_kdtrain(tmp_path))
    args = argparse.Namespace(kdtrain_preset="p", device="cuda", iters=1, warmup=0, channels=64)
    r = bench_attention.kdtrain_attention(args, kd, "affine", 1, 32, 64, {"FAKE_MS": "2.0"})
    assert r["kernel_ms"] == {"bwd_main": 1.0, "fwd wgmma": 0.4}
    assert bench_attention.kernel_times_line(r) == "fwd wgmma 0.400, bwd_main 1.000"  # the forward first
    old = bench_attention.kdtrain_attention(args, kd, "affine", 1, 32, 64, {"FAKE_OLD": "1"})
    assert "error" not in old and "kernel_ms" not in old and old["fwd_bwd_ms"] == 1.0
    assert "--kernel-times" not in old["args"]
    assert bench_attention.kernel_times_line(old) is None
