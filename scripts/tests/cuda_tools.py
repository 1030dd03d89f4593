"""nvcc and cuobjdump for the tests that compile kernels and read their SASS without a GPU:
the toolkit's, or cuobjdump and nvdisasm from PyPI (requirements-cuda-tools.txt, which
scripts/setup.sh installs wherever it finds nvcc). Without nvcc a test skips, saying so.
With nvcc but without cuobjdump or the nvdisasm it runs, it skips too, except on CI
(CI=true, as .ci/run runs) or with KDTRAIN_REQUIRE_SASS=1, where it fails: there setup.sh
has installed them, so a skip would hide SASS checks that silently stopped."""
import os
import shutil
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model  # noqa: E402  (find_tool: where the scripts look for cuobjdump)


def cannot_run(check, require_env, why):
    """Skips the calling test where `check` is optional; fails it on CI (CI=true, as .ci/run
    runs) or with `require_env`=1, where setup.sh installed what it needs and a skip would
    hide a check that silently stopped."""
    if os.environ.get(require_env) == "1" or os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{check} cannot run on this machine, which requires it (CI or {require_env}=1): {why}")
    pytest.skip(f"SKIPPED: {why}")


def sass_tools_missing(why):
    cannot_run("the SASS checks (nvcc is here)", "KDTRAIN_REQUIRE_SASS", why)


def nvcc_and_cuobjdump():
    """(nvcc, cuobjdump) as absolute paths, nvdisasm beside cuobjdump or on PATH; skips the
    calling test without nvcc, and skips or fails (sass_tools_missing) without the others."""
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    nvcc = shutil.which(nvcc) or nvcc
    if not os.path.exists(nvcc):
        pytest.skip("SKIPPED: nvcc not found (set NVCC or install the CUDA toolkit)")
    install = "pip install -r requirements-cuda-tools.txt"
    cuobjdump = attention_model.find_tool("cuobjdump", nvcc)
    if cuobjdump is None:
        sass_tools_missing(f"no cuobjdump beside nvcc or in the NVIDIA Python packages ({install})")
    here = os.path.dirname(cuobjdump)
    if not (os.path.exists(os.path.join(here, "nvdisasm")) or shutil.which("nvdisasm")):
        sass_tools_missing(f"no nvdisasm, which cuobjdump -sass runs, beside {cuobjdump} or on PATH ({install})")
    return nvcc, cuobjdump
