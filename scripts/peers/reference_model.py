#!/usr/bin/env python3
"""Independent float64 reference of the kdtrain model (docs/model.md).

Written from the spec, not from kdtrain's C++, so that it can serve as the checkable
truth: `scripts/tests/test_reference_model.py` validates it against Hugging Face
`transformers` (baseline LLaMA / Qwen2), finite differences and the variant
reductions; `scripts/tests/test_dump_parity.py` then compares `kdtrain dump` with it.

Everything is computed in float64 with torch autograd. Output files are float64.

CLI (computes what `kdtrain dump` computes):
    python3 scripts/peers/reference_model.py --checkpoint DIR --data SHARD \
        --batch-size B --seq-len T --out FILE.safetensors [--grads]
inputs = tokens[0:B*T] as (B, T), targets = tokens[1:B*T+1]; writes `logits` (B,T,V),
`loss` (scalar, mean next-token cross-entropy) and with --grads `grad.<name>` for
every trained parameter (alpha_ma is a buffer and has none).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import (AFFINE_BIAS_DIVISOR_BEFORE_KEY, AFFINE_BIAS_DIVISORS, AFFINE_INFERENCE_NS,  # noqa: E402
                                 ALPHA_ACTIVATIONS, ATTENTION_VARIANTS as VARIANTS, affine_fixed_n, features)
DTYPE = torch.float64

SHARD_HEADER_INTS = 256
SHARD_FORMATS = {  # magic -> (version, token dtype), llm.c conventions
    20240520: (1, np.uint16),
    20240801: (7, np.uint32),
}


# --------------------------------------------------------------------------- config

@dataclass
class RefConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    max_position_embeddings: int = 2048
    attention_variant: str = "baseline"
    alpha_activation: str = "linear_clip"
    alpha_momentum: float = 0.9
    # N of beta (docs/model.md); a config.json without the key predates it: "visible".
    affine_bias_divisor: str = AFFINE_BIAS_DIVISOR_BEFORE_KEY
    # "sequence" outside training: N fixed at affine_train_length (when known) or the call's keys.
    affine_inference_n: str = AFFINE_INFERENCE_NS[0]
    affine_train_length: int = 0
    extra: dict = field(default_factory=dict)  # keys we do not use, kept for inspection

    @property
    def has_sink(self) -> bool:
        return features(self.attention_variant).sink

    @property
    def has_affine(self) -> bool:
        return features(self.attention_variant).affine

    @property
    def has_gate(self) -> bool:
        return features(self.attention_variant).gate


def config_from_dict(d: dict) -> RefConfig:
    known = {f for f in RefConfig.__dataclass_fields__ if f != "extra"}
    required = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size"]
    missing = [k for k in required if k not in d]
    if missing:
        raise ValueError(f"config.json: missing keys {missing}")
    kwargs = {k: d[k] for k in known if k in d and (d[k] is not None or k == "rope_scaling")}
    kwargs.setdefault("num_key_value_heads", d["num_attention_heads"])
    # HF convention: head_dim defaults to hidden_size / num_attention_heads.
    if kwargs.get("head_dim") is None:
        kwargs["head_dim"] = d["hidden_size"] // d["num_attention_heads"]
    cfg = RefConfig(**kwargs, extra={k: v for k, v in d.items() if k not in known})
    if cfg.attention_variant not in VARIANTS:
        raise ValueError(f"config.json: attention_variant {cfg.attention_variant!r} not in {VARIANTS}")
    if cfg.alpha_activation not in ALPHA_ACTIVATIONS:
        raise ValueError(f"config.json: alpha_activation {cfg.alpha_activation!r} not in {ALPHA_ACTIVATIONS}")
    if cfg.affine_bias_divisor not in AFFINE_BIAS_DIVISORS:
        raise ValueError(f"config.json: affine_bias_divisor {cfg.affine_bias_divisor!r} not in "
                         f"{AFFINE_BIAS_DIVISORS}")
    if cfg.affine_inference_n not in AFFINE_INFERENCE_NS:
        raise ValueError(f"config.json: affine_inference_n {cfg.affine_inference_n!r} not in {AFFINE_INFERENCE_NS}")
    if cfg.num_attention_heads % cfg.num_key_value_heads != 0:
        raise ValueError("config.json: num_key_value_heads must divide num_attention_heads")
    if cfg.head_dim % 2 != 0:
        raise ValueError("config.json: head_dim must be even for RoPE")
    return cfg


# --------------------------------------------------------------------------- parameters

def param_shapes(cfg: RefConfig) -> Dict[str, tuple]:
    """Every tensor the checkpoint must hold, with its PyTorch (out, in) shape."""
    C, F_, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "self_attn.q_proj.weight"] = (H * D, C)
        shapes[p + "self_attn.k_proj.weight"] = (Hkv * D, C)
        shapes[p + "self_attn.v_proj.weight"] = (Hkv * D, C)
        if cfg.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (H * D,)
            shapes[p + "self_attn.k_proj.bias"] = (Hkv * D,)
            shapes[p + "self_attn.v_proj.bias"] = (Hkv * D,)
        shapes[p + "self_attn.o_proj.weight"] = (C, H * D)
        if cfg.has_sink:
            shapes[p + "self_attn.sinks"] = (H,)
        if cfg.has_affine:
            shapes[p + "self_attn.alpha_proj.weight"] = (H, C)
            shapes[p + "self_attn.alpha_ma"] = (H,)
        if cfg.has_gate:
            shapes[p + "self_attn.gate_proj.weight"] = (H * D, C)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (F_, C)
        shapes[p + "mlp.up_proj.weight"] = (F_, C)
        shapes[p + "mlp.down_proj.weight"] = (C, F_)
    shapes["model.norm.weight"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def is_trainable(name: str) -> bool:
    # alpha_ma is a running mean updated outside the gradient (docs/model.md).
    return not name.endswith(".alpha_ma")


def load_checkpoint(path: str):
    """Returns (RefConfig, {name: float64 tensor}) from config.json + model.safetensors."""
    from safetensors.numpy import load_file

    with open(os.path.join(path, "config.json")) as f:
        cfg = config_from_dict(json.load(f))
    raw = load_file(os.path.join(path, "model.safetensors"))
    expected = param_shapes(cfg)
    params = {}
    for name, shape in expected.items():
        if name not in raw:
            raise ValueError(f"{path}/model.safetensors: missing tensor {name}")
        arr = raw[name]
        if tuple(arr.shape) != shape:
            raise ValueError(f"{path}/model.safetensors: {name} has shape {tuple(arr.shape)}, want {shape}")
        params[name] = torch.from_numpy(np.asarray(arr, dtype=np.float64).copy())
    # A tied checkpoint may still carry lm_head.weight (some exporters write it); it must equal
    # the embedding, otherwise the checkpoint contradicts its config.
    if cfg.tie_word_embeddings and "lm_head.weight" in raw:
        if not np.array_equal(raw["lm_head.weight"], raw["model.embed_tokens.weight"]):
            raise ValueError(f"{path}: tie_word_embeddings but lm_head.weight differs from the embedding")
    unexpected = sorted(set(raw) - set(expected) - {"lm_head.weight"})
    if unexpected:
        raise ValueError(f"{path}/model.safetensors: unexpected tensors {unexpected[:5]}")
    return cfg, params


# --------------------------------------------------------------------------- data

def read_shard(path: str) -> np.ndarray:
    """Tokens of an llm.c shard as int64, validating header and length."""
    with open(path, "rb") as f:
        blob = f.read()
    header_bytes = SHARD_HEADER_INTS * 4
    if len(blob) < header_bytes:
        raise ValueError(f"{path}: shorter than the {header_bytes}-byte header")
    header = np.frombuffer(blob[:header_bytes], dtype="<i4")
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    if magic not in SHARD_FORMATS:
        raise ValueError(f"{path}: bad magic {magic}")
    want_version, dtype = SHARD_FORMATS[magic]
    if version != want_version:
        raise ValueError(f"{path}: magic {magic} needs version {want_version}, got {version}")
    itemsize = np.dtype(dtype).itemsize
    if len(blob) != header_bytes + count * itemsize:
        raise ValueError(f"{path}: header says {count} tokens but the file holds "
                         f"{(len(blob) - header_bytes) / itemsize:g}")
    tokens = np.frombuffer(blob[header_bytes:], dtype=np.dtype(dtype).newbyteorder("<"))
    return tokens.astype(np.int64)


def write_shard(path: str, tokens, version: int = 1) -> None:
    """Writes an llm.c shard (version 1: uint16, version 7: uint32). Used by the tests."""
    magic, dtype = {1: (20240520, np.uint16), 7: (20240801, np.uint32)}[version]
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(dtype).max):
        raise ValueError(f"token ids do not fit version {version}")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = magic, version, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.dtype(dtype).newbyteorder("<")).tobytes())


def batch_from_tokens(tokens: np.ndarray, B: int, T: int, vocab_size: int):
    """(inputs, targets) as (B, T) int64 tensors: tokens[0:B*T] and tokens[1:B*T+1]."""
    n = B * T
    if tokens.size < n + 1:
        raise ValueError(f"need {n + 1} tokens for batch {B}x{T}, shard has {tokens.size}")
    window = tokens[: n + 1]
    if window.max() >= vocab_size:
        raise ValueError(f"token id {int(window.max())} >= vocab_size {vocab_size}")
    inputs = torch.from_numpy(window[:n].reshape(B, T).copy())
    targets = torch.from_numpy(window[1:].reshape(B, T).copy())
    return inputs, targets


# --------------------------------------------------------------------------- RoPE

def rope_inv_freq(cfg: RefConfig) -> torch.Tensor:
    """inv_freq (D/2) in float64: theta^(-2i/D), then llama3 frequency scaling if configured.

    llama3 scaling (Llama 3.1 release): with L = original_max_position_embeddings,
    wavelength w = 2*pi/f; w < L/high_freq_factor keeps f; w > L/low_freq_factor uses
    f/factor; in between, interpolate with s = (L/w - low)/(high - low):
    f' = (1 - s) f/factor + s f.
    """
    D = cfg.head_dim
    exponents = torch.arange(0, D, 2, dtype=DTYPE) / D
    inv_freq = 1.0 / (cfg.rope_theta ** exponents)
    scaling = cfg.rope_scaling
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind != "llama3":
        raise ValueError(f"rope_scaling.rope_type {kind!r} not supported (only llama3)")
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    original = float(scaling["original_max_position_embeddings"])
    wavelen = 2.0 * math.pi / inv_freq
    long_wave = wavelen > original / low   # low frequencies: fully interpolated
    short_wave = wavelen < original / high  # high frequencies: untouched
    smooth = (original / wavelen - low) / (high - low)
    middle = (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
    return torch.where(long_wave, inv_freq / factor, torch.where(short_wave, inv_freq, middle))


def rope_cos_sin(inv_freq: torch.Tensor, T: int):
    """cos, sin (T, D) laid out as HF does: the D/2 angles repeated for both halves."""
    angles = torch.arange(T, dtype=DTYPE)[:, None] * inv_freq.to(DTYPE)[None, :]
    doubled = torch.cat([angles, angles], dim=-1)
    return doubled.cos(), doubled.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, heads, T, D)."""
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------- ops

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def alpha_activation(z: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "linear_clip":
        # 0 below -5, 0.1 z + 0.5 inside, 1 above 5: gradient 0.1 inside and 0 outside.
        return torch.clamp(0.1 * z + 0.5, 0.0, 1.0)
    if kind == "sigmoid":
        return torch.sigmoid(z)
    raise ValueError(f"unknown alpha activation {kind!r}")


def attention_core(q, k, v, variant: str, *, sinks=None, alpha=None, alpha_ma=None,
                   bias_divisor: str = "sequence", fixed_n: Optional[int] = None,
                   return_weights: bool = False):
    """Causal attention for every variant (docs/model.md), before the gate and o_proj.

    q (B, H, T, D); k, v (B, Hkv, T, D) with RoPE applied; query head h reads kv head
    h // (H/Hkv). sinks (H) for `sink`; alpha (B, H, T) activated and alpha_ma (H) for
    the affine variants, whose bias beta_i = (alpha_ma - alpha_i) / N sits on the visible
    keys with N = T, or fixed_n when given (bias_divisor "sequence"), or i + 1 ("visible"). Returns O (B, H, T, D) and, if asked, the effective weights
    W (B, H, T, T) with O = W V (the affine bias folded in as beta on every visible key).
    """
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~visible, float("-inf"))
    f = features(variant)
    if f.sink:
        # The sink is one more logit in the denominator whose value row is zero.
        sink_col = sinks.to(DTYPE).view(1, H, 1, 1).expand(B, H, T, 1)
        probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :T]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = probs @ v
    weights = probs
    if f.affine:
        a = alpha.unsqueeze(-1)                                   # (B, H, T, 1)
        if bias_divisor == "sequence":
            n_keys = torch.full((1, 1, 1, 1), float(fixed_n or T), dtype=DTYPE)
        elif bias_divisor == "visible":
            n_keys = torch.arange(1, T + 1, dtype=DTYPE).view(1, 1, T, 1)
        else:
            raise ValueError(f"unknown affine bias divisor {bias_divisor!r} (one of {AFFINE_BIAS_DIVISORS})")
        beta = (alpha_ma.detach().to(DTYPE).view(1, H, 1, 1) - a) / n_keys
        out = a * out + beta * v.cumsum(dim=2)                    # causal prefix sum of V
        if return_weights:
            weights = a * probs + beta * visible.to(DTYPE)
    return (out, weights) if return_weights else out


def attention_block(x, p: Dict[str, torch.Tensor], prefix: str, cfg: RefConfig, cos, sin,
                    overrides: Optional[dict] = None):
    """x: normed hidden states (B, T, C) -> attention output after o_proj (B, T, C).

    `overrides` (tests only): {"alpha": value forced for every alpha, "alpha_ma": value
    forced for alpha_ma, "gate": value forced for sigmoid(gate)}.
    """
    overrides = overrides or {}
    B, T, _ = x.shape
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    a = prefix + "self_attn."

    def proj(name, n_heads):
        y = F.linear(x, p[a + name + ".weight"], p.get(a + name + ".bias"))
        return y.view(B, T, n_heads, D).transpose(1, 2)

    q = apply_rope(proj("q_proj", H), cos, sin)
    k = apply_rope(proj("k_proj", Hkv), cos, sin)
    v = proj("v_proj", Hkv)

    alpha = alpha_ma = None
    if cfg.has_affine:
        alpha = alpha_activation(F.linear(x, p[a + "alpha_proj.weight"]), cfg.alpha_activation)
        alpha = alpha.transpose(1, 2)  # (B, H, T)
        alpha_ma = p[a + "alpha_ma"]
        if "alpha" in overrides:
            alpha = torch.full_like(alpha, overrides["alpha"])
        if "alpha_ma" in overrides:
            alpha_ma = torch.full_like(alpha_ma, overrides["alpha_ma"])
    o = attention_core(q, k, v, cfg.attention_variant, sinks=p.get(a + "sinks"), alpha=alpha,
                       alpha_ma=alpha_ma, bias_divisor=cfg.affine_bias_divisor,
                       fixed_n=affine_fixed_n(cfg.affine_bias_divisor, cfg.affine_inference_n,
                                              cfg.affine_train_length))
    o = o.transpose(1, 2).reshape(B, T, H * D)  # heads concatenated, head-major, as HF
    if cfg.has_gate:
        gate = torch.sigmoid(F.linear(x, p[a + "gate_proj.weight"]))
        if "gate" in overrides:
            gate = torch.full_like(gate, overrides["gate"])
        o = o * gate
    return F.linear(o, p[a + "o_proj.weight"])


def forward(cfg: RefConfig, params: Dict[str, torch.Tensor], tokens: torch.Tensor, *,
            inv_freq: Optional[torch.Tensor] = None, overrides: Optional[dict] = None):
    """Logits (B, T, V) in float64 for token ids (B, T); positions 0..T-1 per row.

    inv_freq replaces the computed RoPE frequencies (the transformers comparison feeds
    both models the same ones, see the test).
    """
    B, T = tokens.shape
    cos, sin = rope_cos_sin(rope_inv_freq(cfg) if inv_freq is None else inv_freq, T)
    h = params["model.embed_tokens.weight"][tokens]
    eps = cfg.rms_norm_eps
    for i in range(cfg.num_hidden_layers):
        pre = f"model.layers.{i}."
        x = rms_norm(h, params[pre + "input_layernorm.weight"], eps)
        h = h + attention_block(x, params, pre, cfg, cos, sin, overrides)
        x = rms_norm(h, params[pre + "post_attention_layernorm.weight"], eps)
        gate = F.linear(x, params[pre + "mlp.gate_proj.weight"])
        up = F.linear(x, params[pre + "mlp.up_proj.weight"])
        h = h + F.linear(F.silu(gate) * up, params[pre + "mlp.down_proj.weight"])
    h = rms_norm(h, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]
    return F.linear(h, head)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all B*T positions."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean")


def loss_and_grads(cfg: RefConfig, params: Dict[str, torch.Tensor], tokens: torch.Tensor,
                   targets: torch.Tensor, *, inv_freq=None, overrides=None):
    """(logits, loss, {name: grad}) with grads for every trainable tensor, float64."""
    leaves = {}
    for name, t in params.items():
        leaf = t.detach().to(DTYPE).clone()
        leaf.requires_grad_(is_trainable(name))
        leaves[name] = leaf
    logits = forward(cfg, leaves, tokens, inv_freq=inv_freq, overrides=overrides)
    loss = cross_entropy(logits, targets)
    trained = [n for n in leaves if is_trainable(n)]
    grads = torch.autograd.grad(loss, [leaves[n] for n in trained], allow_unused=True)
    out = {n: (g if g is not None else torch.zeros_like(leaves[n])) for n, g in zip(trained, grads)}
    return logits.detach(), loss.detach(), out


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="directory with config.json + model.safetensors")
    ap.add_argument("--data", required=True, help="llm.c token shard")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--out", required=True, help="output .safetensors (float64 tensors)")
    ap.add_argument("--grads", action="store_true", help="also write grad.<name> per trained tensor")
    args = ap.parse_args(argv)
    if args.batch_size <= 0 or args.seq_len <= 0:
        ap.error("--batch-size and --seq-len must be positive")

    from safetensors.numpy import save_file

    cfg, params = load_checkpoint(args.checkpoint)
    inputs, targets = batch_from_tokens(read_shard(args.data), args.batch_size, args.seq_len,
                                        cfg.vocab_size)
    if args.grads:
        logits, loss, grads = loss_and_grads(cfg, params, inputs, targets)
    else:
        with torch.no_grad():
            logits = forward(cfg, params, inputs)
            loss = cross_entropy(logits, targets)
        grads = {}
    tensors = {"logits": logits.numpy(), "loss": np.asarray(loss.item(), dtype=np.float64)}
    for name, g in grads.items():
        tensors["grad." + name] = g.detach().numpy()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    tmp = os.path.join(out_dir, "." + os.path.basename(args.out) + ".tmp")
    # np.ascontiguousarray would turn the 0-d loss into shape (1,); keep it a scalar.
    save_file({k: v if v.ndim == 0 else np.ascontiguousarray(v) for k, v in tensors.items()}, tmp,
              metadata={"dtype": "float64", "source": "scripts/peers/reference_model.py"})
    os.replace(tmp, args.out)  # never leave a half-written output
    print(f"reference: loss {loss.item():.10f}, wrote {len(tensors)} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
