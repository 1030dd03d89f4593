"""The attention kernels' SASS checks and performance model, without a GPU: compiles the
forward and backward (both backward builds) with nvcc once, then
- scripts/gpu/bwd_sass_check.py must pass on the backward (dq off the MMA warps, the
  atomics build's vector reductions: docs/flash_attention.md),
- scripts/gpu/attention_model.py must read the same SASS and write a JSON with a
  prediction per kernel and per head dim.
Skips, saying why, where nvcc or cuobjdump is absent."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from repo_paths import REPO

GPU_SCRIPTS = REPO / "scripts" / "gpu"
sys.path.insert(0, str(GPU_SCRIPTS))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc) and shutil.which(nvcc) is None:
        pytest.skip("SKIPPED: nvcc not found (set NVCC or install the CUDA toolkit)")
    import attention_model
    if attention_model.find_tool("cuobjdump", shutil.which(nvcc) or nvcc) is None:
        pytest.skip("SKIPPED: no cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)")
    out = tmp_path_factory.mktemp("attention_sass")
    os.environ["NVCC"] = shutil.which(nvcc) or nvcc
    attention_model.compile_all(str(out))
    return out


def test_backward_dq_sass_checks_pass(built):
    r = subprocess.run([sys.executable, str(GPU_SCRIPTS / "bwd_sass_check.py"), str(built / "bwd.sass"),
                        str(built / "bwd_atomic.sass")], capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": OK") == 8  # 4 deterministic + 4 atomics instantiations


def test_performance_model_predicts_each_kernel(built, tmp_path):
    out = tmp_path / "model.json"
    r = subprocess.run([sys.executable, str(GPU_SCRIPTS / "attention_model.py"), "--sass-dir", str(built), "--json",
                        str(out)], capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert {(k["kernel"], k["D"]) for k in result["kernels"]} == {
        (k, d) for k in ("mma_sync", "wgmma", "bwd_main", "bwd_main atomics", "bwd_main wgmma") for d in (64, 128)}
    for k in result["kernels"]:
        assert 0.05 < k["ms"] < 20, k
    assert [(t["D"], t["backward"]) for t in result["totals"]] == [
        (d, b) for d in (64, 128) for b in ("bwd_main", "bwd_main wgmma")]
    assert "clock_ghz" in result["assumptions"]
