"""The wgmma descriptors and swizzled layouts of kernels/tc/wgmma_desc.h and
kernels/tc/wgmma.cuh against CuTe's (tests/tc/cute/wgmma_desc_vs_cute.cpp), a second,
independent source: the headers of the nvidia-cutlass package pinned in requirements.txt.
Skips, saying why, where the package, the CUDA C++ standard library headers it needs
(cuda/std, shipped with the CUDA toolkit) or a host C++ compiler are absent."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def test_wgmma_descriptors_match_cute(tmp_path):
    cute = cutlass_include()
    if cute is None:
        pytest.skip("nvidia-cutlass (CuTe headers) not installed: pip install -r requirements.txt")
    cccl = cccl_include()
    if cccl is None:
        pytest.skip("cuda/std headers (CUDA toolkit) not found: set CUDA_HOME")
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    exe = tmp_path / "wgmma_desc_vs_cute"
    cmd = [cxx, "-std=c++17", "-O1", "-w", f"-I{cute}", f"-I{REPO}", f"-I{cccl}", f"-I{cccl.parent}",
           str(REPO / "tests" / "cute" / "wgmma_desc_vs_cute.cpp"), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    # CuTe prints a note per descriptor that it cannot take a shared address on the host;
    # the start address is compared through its pointer arithmetic instead.
    report = "\n".join(l for l in run.stdout.splitlines() if "cast_smem_ptr_to_uint" not in l)
    print(report)
    assert run.returncode == 0, report
    assert "mismatches: 0" in report
