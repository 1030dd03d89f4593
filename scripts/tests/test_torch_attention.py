"""scripts/peers/torch_attention.py: the strong-user formulation of every variant (SDPA,
FlexAttention with the sink through the log-sum-exp, SDPA + cumsum) computes the
same attention as the naive T x T form, forward and gradients, on the CPU in fp32.

Tolerance: both sides are fp32 with O(T) summation differences on O(1) values;
1e-5 relative to the largest magnitude is ~100 float ulps at T = 24.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import torch_attention  # noqa: E402


def inputs(torch, B=2, H=4, Hkv=2, T=24, D=16):
    g = torch.Generator().manual_seed(7)
    leaf = lambda *shape: torch.randn(*shape, generator=g).requires_grad_(True)  # noqa: E731
    return dict(q=leaf(B, H, T, D), k=leaf(B, Hkv, T, D), v=leaf(B, Hkv, T, D),
                sinks=leaf(H), alpha=torch.rand(B, T, H, generator=g).requires_grad_(True),
                alpha_ma=torch.rand(H, generator=g))


@pytest.mark.parametrize("variant", torch_attention.VARIANTS)
def test_formulation_matches_the_naive_form(variant):
    torch = pytest.importorskip("torch")
    x = inputs(torch)
    B, H, T, D = x["q"].shape
    Hkv = x["k"].shape[1]
    leaves = [x["q"], x["k"], x["v"], x["sinks"], x["alpha"]]
    dout = torch.randn(B, T, H, D, generator=torch.Generator().manual_seed(3))
    results = []
    for eager in (False, True):
        core = torch_attention.Attention(torch, variant, H, Hkv, D, "cpu", eager=eager)
        core.prepare(T)
        o = core(x["q"], x["k"], x["v"], sinks=x["sinks"], alpha=x["alpha"], alpha_ma=x["alpha_ma"])
        assert o.shape == (B, T, H, D)
        grads = torch.autograd.grad((o * dout).sum(), leaves, allow_unused=True)
        results.append((o.detach(), grads))
    (o_fast, g_fast), (o_ref, g_ref) = results
    scale = o_ref.abs().max()
    assert (o_fast - o_ref).abs().max() <= 1e-5 * scale
    for name, a, b in zip(("q", "k", "v", "sinks", "alpha"), g_fast, g_ref):
        if b is None:  # the variant does not use it
            assert a is None or a.abs().max() == 0, name
            continue
        assert (a - b).abs().max() <= 1e-5 * b.abs().max(), name


def test_sink_needs_prepare():
    torch = pytest.importorskip("torch")
    x = inputs(torch)
    core = torch_attention.Attention(torch, "sink", 4, 2, 16, "cpu")
    with pytest.raises(RuntimeError, match="prepare"):
        core(x["q"], x["k"], x["v"], sinks=x["sinks"])


def test_formulations_are_stated():
    torch = pytest.importorskip("torch")
    for v in torch_attention.VARIANTS:
        text = torch_attention.Attention(torch, v, 4, 2, 16, "cpu").formulation()
        assert "SDPA" in text or "FlexAttention" in text
        assert "flash" not in text and "compiled" not in text  # neither exists on the CPU
    assert "sigmoid(lse - s_h)" in torch_attention.FORMULATIONS["sink"]
