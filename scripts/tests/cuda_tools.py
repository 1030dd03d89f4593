"""nvcc and cuobjdump for the tests that compile kernels and read their SASS without a GPU:
the toolkit's, or cuobjdump from the PyPI package nvidia-cuda-cuobjdump. A test without
them skips, saying which is missing."""
import os
import shutil
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model  # noqa: E402  (find_tool: where the scripts look for cuobjdump)


def nvcc_and_cuobjdump():
    """(nvcc, cuobjdump) as absolute paths; skips the calling test when either is absent."""
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    nvcc = shutil.which(nvcc) or nvcc
    if not os.path.exists(nvcc):
        pytest.skip("SKIPPED: nvcc not found (set NVCC or install the CUDA toolkit)")
    cuobjdump = attention_model.find_tool("cuobjdump", nvcc)
    if cuobjdump is None:
        pytest.skip("SKIPPED: no cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)")
    return nvcc, cuobjdump
