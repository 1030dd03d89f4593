"""The wgmma descriptors and swizzled layouts of kernels/tc/wgmma_desc.h and
kernels/tc/wgmma.cuh, and the emulator's register fragments (kernels/tc/wgmma_fragments.h),
against CuTe's (tests/tc/cute/wgmma_desc_vs_cute.cpp), a second, independent source: the
headers of the nvidia-cutlass package pinned in requirements.txt.
Where the package, the CUDA C++ standard library headers it needs (cuda/std, shipped with
the CUDA toolkit) or a host C++ compiler are absent it skips, saying why, except on CI
(CI=true, as .ci/run runs) or with KDTRAIN_REQUIRE_CUTE=1, where it fails: there
scripts/setup.sh has installed them, so a skip would hide a check that silently stopped."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cuda_tools import cannot_run
from repo_paths import REPO


def cutlass_include():
    try:
        import cutlass_library  # the nvidia-cutlass package
    except ImportError:
        return None
    inc = Path(cutlass_library.__file__).parent / "source" / "include"
    return inc if (inc / "cute" / "arch" / "mma_sm90_desc.hpp").is_file() else None


def cccl_include():
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("include/cccl", "include"):
            inc = Path(root) / sub
            if (inc / "cuda" / "std" / "utility").is_file():
                return inc
    return None


def unavailable(why):
    cannot_run("the CuTe cross-check", "KDTRAIN_REQUIRE_CUTE", why)


def test_wgmma_descriptors_match_cute(tmp_path):
    cute = cutlass_include()
    if cute is None:
        unavailable("nvidia-cutlass (CuTe headers) not installed: pip install -r requirements.txt")
    cccl = cccl_include()
    if cccl is None:
        unavailable("cuda/std headers (CUDA toolkit) not found: set CUDA_HOME")
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        unavailable("no host C++ compiler")
    exe = tmp_path / "wgmma_desc_vs_cute"
    cmd = [cxx, "-std=c++17", "-O1", "-w", f"-I{cute}", f"-I{REPO}", f"-I{cccl}", f"-I{cccl.parent}",
           str(REPO / "tests" / "tc" / "cute" / "wgmma_desc_vs_cute.cpp"), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    # CuTe prints a note per descriptor that it cannot take a shared address on the host;
    # the start address is compared through its pointer arithmetic instead.
    report = "\n".join(l for l in run.stdout.splitlines() if "cast_smem_ptr_to_uint" not in l)
    print(report)
    assert run.returncode == 0, report
    assert "mismatches: 0" in report
    # The register fragments were compared too (a binary built from an older source would not).
    assert "register A fragment vs ALayout_64x16" in report and "CLayout_64x128" in report


def test_missing_cute_fails_where_it_is_required(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("KDTRAIN_REQUIRE_CUTE", "1")
    with pytest.raises(pytest.fail.Exception, match="requires it"):
        unavailable("nvidia-cutlass (CuTe headers) not installed")
    monkeypatch.delenv("KDTRAIN_REQUIRE_CUTE")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        unavailable("no host C++ compiler")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        unavailable("no host C++ compiler")
