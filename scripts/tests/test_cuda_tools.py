"""scripts/tests/cuda_tools.py: where nvcc is present, missing cuobjdump or nvdisasm fails the
SASS checks on CI (CI=true) or with KDTRAIN_REQUIRE_SASS=1, and skips them elsewhere; without
nvcc they always skip. A fake nvcc and cuobjdump (empty files) stand in for the toolkit."""
import pytest

import cuda_tools


@pytest.fixture
def fake_toolkit(tmp_path, monkeypatch):
    """An 'nvcc' and a 'cuobjdump' beside it, no nvdisasm anywhere on PATH."""
    for tool in ("nvcc", "cuobjdump"):
        (tmp_path / tool).write_text("")
    monkeypatch.setenv("NVCC", str(tmp_path / "nvcc"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("KDTRAIN_REQUIRE_SASS", raising=False)
    return tmp_path


def test_missing_tools_skip_where_optional(fake_toolkit):
    with pytest.raises(pytest.skip.Exception, match="no nvdisasm"):
        cuda_tools.nvcc_and_cuobjdump()


@pytest.mark.parametrize("env", [("CI", "true"), ("KDTRAIN_REQUIRE_SASS", "1")])
def test_missing_tools_fail_where_required(fake_toolkit, monkeypatch, env):
    monkeypatch.setenv(*env)
    with pytest.raises(pytest.fail.Exception, match="requires it.*no nvdisasm.*requirements-cuda-tools.txt"):
        cuda_tools.nvcc_and_cuobjdump()
    monkeypatch.setattr(cuda_tools.attention_model, "find_tool", lambda name, nvcc: None)
    with pytest.raises(pytest.fail.Exception, match="no cuobjdump"):
        cuda_tools.nvcc_and_cuobjdump()


def test_all_tools_found(fake_toolkit, monkeypatch):
    (fake_toolkit / "nvdisasm").write_text("")
    monkeypatch.setenv("CI", "true")
    assert cuda_tools.nvcc_and_cuobjdump() == (str(fake_toolkit / "nvcc"), str(fake_toolkit / "cuobjdump"))


def test_without_nvcc_always_skips(tmp_path, monkeypatch):
    monkeypatch.setenv("NVCC", str(tmp_path / "no-nvcc"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match="nvcc not found"):
        cuda_tools.nvcc_and_cuobjdump()
