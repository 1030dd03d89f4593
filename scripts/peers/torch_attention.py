"""The attention core of each kdtrain variant written the way a strong PyTorch user
writes it: the peer of scripts/peers/bench_attention.py and scripts/peers/bench_pytorch.py
(docs/performance.md states the same formulations).

q is (B, H, T, D), k and v (B, Hkv, T, D) with H a multiple of Hkv; the result is
(B, T, H, D). The gate (gated, affine-gated) is elementwise on the result and is
applied by the caller (gate()): it needs the layer's own projection.

  baseline, gated   SDPA, causal, GQA through enable_gqa (the flash backend on cuda)
  sink              FlexAttention with a causal block mask, returning its log-sum-exp
                    lse (return_aux=AuxRequest(lse=True)); the sink column folds in afterwards as out * sigmoid(lse - s_h).
                    Exact: softmax over [scores, s_h] scales each row's P V by
                    Z / (Z + e^s_h) = sigmoid(lse - s_h), and gradients flow through lse.
  affine            SDPA, then alpha * out + beta * cumsum(V) (prefix sum in fp32)
  eager (any)       the naive form: T x T scores, masked softmax (with the sink column
                    for sink), P V. It holds B*H*T^2 fp32 scores per layer.

FlexAttention is compiled on cuda (its only fast form; a compiled model traces it
inline). On the CPU it runs eagerly (unfused, correct, slow), which is what the
CPU smoke tests exercise.
"""
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import ATTENTION_VARIANTS as VARIANTS, VARIANT_ROWS, features  # noqa: E402

FORMULATIONS = {row.name: row.torch_formulation for row in VARIANT_ROWS}


def has_sink(variant):
    return features(variant).sink


def has_affine(variant):
    return features(variant).affine


def has_gate(variant):
    return features(variant).gate


def linear_clip(z):
    """kdtrain's default alpha activation: clamp(0.1 z + 0.5, 0, 1)."""
    return (0.1 * z + 0.5).clamp(0.0, 1.0)


def gate(torch, o, gate_z):
    return o * torch.sigmoid(gate_z)


class Attention:
    """One variant's core. prepare(T) builds what depends on the sequence length (the
    block mask) outside any compiled region; call it before the first forward."""

    def __init__(self, torch, variant, H, Hkv, D, device, eager=False, bias_divisor="sequence"):
        features(variant)  # refuses an unknown variant, naming the choices
        self.bias_divisor = bias_divisor  # N of the affine beta, as kdtrain's attention.affine_bias_divisor
        if H % Hkv:
            raise ValueError(f"H={H} is not a multiple of Hkv={Hkv}")
        self.torch, self.variant, self.H, self.Hkv, self.D = torch, variant, H, Hkv, D
        self.device = torch.device(device)
        self.eager = eager
        self.block_mask = None
        self._flex = None
        if has_sink(variant) and not eager:
            from torch.nn.attention.flex_attention import flex_attention
            self._flex_raw = flex_attention
            if self.device.type == "cuda":
                self._flex = torch.compile(flex_attention, dynamic=False)
            else:  # formulation() says so; the warning would only repeat it
                warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
                self._flex = flex_attention

    def formulation(self):
        if self.eager:
            return "eager T x T softmax" + (" with a sink column" if has_sink(self.variant) else "")
        if self.device.type == "cuda":
            return FORMULATIONS[self.variant]
        # No flash backend and no compiled FlexAttention on the CPU.
        return FORMULATIONS[self.variant].replace("SDPA flash", "SDPA").replace(
            "compiled", "eager, unfused on cpu")

    def prepare(self, T):
        if self._flex is not None and (self.block_mask is None or self.block_mask.shape[-1] != T):
            from torch.nn.attention.flex_attention import create_block_mask
            self.block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx,
                                                None, None, T, T, device=self.device)

    def __call__(self, q, k, v, sinks=None, alpha=None, alpha_ma=None):
        """alpha (B, T, H) activated, alpha_ma (H), sinks (H): as the variant needs."""
        torch = self.torch
        if self.eager:
            o = self._eager_core(q, k, v, sinks)
        elif has_sink(self.variant):
            o = self._sink_core(q, k, v, sinks)
        else:
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=self.H != self.Hkv)
        o = o.transpose(1, 2)  # (B, T, H, D)
        if has_affine(self.variant):
            # The exported model's affine term (kdtrain_hf/modeling_kdtrain.py), in fp32.
            from kdtrain_hf.modeling_kdtrain import affine_mix
            vv = v.float().repeat_interleave(self.H // self.Hkv, 1)  # (B, H, T, D)
            o = affine_mix(o.transpose(1, 2).float(), vv, alpha.float().transpose(1, 2),
                           alpha_ma.float(), self.bias_divisor).transpose(1, 2).to(q.dtype)
        return o

    def _sink_core(self, q, k, v, sinks):
        torch = self.torch
        if self.block_mask is None or self.block_mask.shape[-1] != q.shape[2]:
            raise RuntimeError("Attention.prepare(T) was not called for this sequence length")
        flex = self._flex_raw if torch.compiler.is_compiling() else self._flex
        from torch.nn.attention.flex_attention import AuxRequest  # torch >= 2.9 (requirements.txt)
        o, aux = flex(q, k, v, block_mask=self.block_mask, enable_gqa=self.H != self.Hkv,
                      return_aux=AuxRequest(lse=True))
        lse = aux.lse  # natural log, (B, H, T), fp32
        scale = torch.sigmoid(lse - sinks.float().view(1, self.H, 1))  # (B, H, T), fp32
        return (o.float() * scale.unsqueeze(-1)).to(q.dtype)

    def _eager_core(self, q, k, v, sinks):
        torch = self.torch
        T, rep = q.shape[2], self.H // self.Hkv
        kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ kk.transpose(-1, -2)).float() / math.sqrt(self.D)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        if has_sink(self.variant):
            col = sinks.float().view(1, self.H, 1, 1).expand(s.shape[0], self.H, T, 1)
            p = torch.softmax(torch.cat((s, col), -1), -1)[..., :T]
        else:
            p = torch.softmax(s, -1)
        return p.to(vv.dtype) @ vv
