"""Validates scripts/peers/reference_model.py independently of kdtrain.

(a) baseline LLaMA (llama3 RoPE scaling, GQA, tied) and Qwen2 (q/k/v bias, untied)
    against Hugging Face transformers in float64: logits, loss and every gradient;
(b) autograd against central finite differences for every variant;
(c) each variant reduces exactly to the baseline when its extra term vanishes;
(d) affine: every query's total attention mass equals alpha_ma;
plus the shard reader/writer and the CLI.
"""
import json
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import reference_model as ref  # noqa: E402  (pytest.ini puts scripts/ on the path)

from kdtrain_hf.variants import VARIANT_CASES  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402


def tiny_config(variant="baseline", activation="linear_clip", **over):
    d = dict(hidden_size=8, intermediate_size=12, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=4, vocab_size=11, rms_norm_eps=1e-5,
             rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
             attention_bias=True, attention_variant=variant, alpha_activation=activation)
    d.update(over)
    return ref.config_from_dict(d)


def random_params(cfg, seed=0):
    """Random float64 parameters at scales that keep activations O(1)."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in ref.param_shapes(cfg).items():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("alpha_ma"):
            t = 0.2 + 0.7 * torch.rand(shape, generator=g, dtype=torch.float64)
        elif name.endswith("sinks") or name.endswith(".bias"):
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        elif name == "model.embed_tokens.weight":
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        else:  # (out, in) matrices: unit-variance outputs
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
            if name.endswith("alpha_proj.weight"):
                t = t * 3.0  # spread alpha over the activation's range, not just near 0.5
        params[name] = t
    return params


def random_tokens(cfg, B=2, T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=g)
    return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


# ----------------------------------------------------------------------------- (a) transformers

def _hf_models():
    transformers = pytest.importorskip("transformers")
    llama = transformers.LlamaConfig(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=256, tie_word_embeddings=True,
        attention_bias=False,
        # original length 128 with head_dim 16 puts one frequency in each llama3 regime
        # (kept, interpolated, divided by factor): see test_llama3_inv_freq_regimes.
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128},
        attn_implementation="sdpa")
    qwen = transformers.Qwen2Config(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
        max_position_embeddings=256, tie_word_embeddings=False, use_sliding_window=False,
        attn_implementation="sdpa")
    return {"llama": (transformers.LlamaForCausalLM, llama),
            "qwen2": (transformers.Qwen2ForCausalLM, qwen)}


def _kdtrain_config_json(hf_cfg, family):
    head_dim = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // hf_cfg.num_attention_heads
    return {
        "hidden_size": hf_cfg.hidden_size, "intermediate_size": hf_cfg.intermediate_size,
        "num_hidden_layers": hf_cfg.num_hidden_layers,
        "num_attention_heads": hf_cfg.num_attention_heads,
        "num_key_value_heads": hf_cfg.num_key_value_heads, "head_dim": head_dim,
        "vocab_size": hf_cfg.vocab_size, "rms_norm_eps": hf_cfg.rms_norm_eps,
        "rope_theta": hf_cfg.rope_theta, "rope_scaling": hf_cfg.rope_scaling,
        "tie_word_embeddings": hf_cfg.tie_word_embeddings,
        # Qwen2 always has q/k/v bias; LLaMA has it only when configured.
        "attention_bias": True if family == "qwen2" else bool(hf_cfg.attention_bias),
        "max_position_embeddings": hf_cfg.max_position_embeddings,
        "attention_variant": "baseline", "alpha_activation": "linear_clip", "alpha_momentum": 0.9,
    }


def _build_hf(family, tmp_path, seed=0):
    """A random float64 HF model whose weights are fp32-representable, saved kdtrain-style."""
    cls, hf_cfg = _hf_models()[family]
    torch.manual_seed(seed)
    model = cls(hf_cfg).to(torch.float64).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.dim() == 2:
                scale = 1.0 if "embed_tokens" in name else 1.0 / math.sqrt(p.shape[1])
                p.copy_(scale * torch.randn_like(p))
            # The checkpoint format is fp32: round so both models see identical values.
            p.copy_(p.float().double())
    tensors = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and hf_cfg.tie_word_embeddings:
            continue
        tensors[name] = t.detach().float().numpy().copy()
    ckpt = tmp_path / family
    ckpt.mkdir()
    save_file(tensors, str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(json.dumps(_kdtrain_config_json(hf_cfg, family)))
    return model, hf_cfg, str(ckpt)


def _make_hf_float64(model, inv_freq):
    """transformers hard-codes float32 in RMSNorm and the rotary cos/sin; replace those two
    forwards with the same formulas in float64 so the comparison can be tight. The rest
    (rotate_half, GQA, biases, MLP, head) stays transformers' own code."""
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            def rms_forward(hidden_states, m=module):
                var = hidden_states.pow(2).mean(-1, keepdim=True)
                return m.weight * (hidden_states * torch.rsqrt(var + m.variance_epsilon))
            module.forward = rms_forward
    rotary = model.model.rotary_emb
    assert rotary.attention_scaling == 1.0

    def rotary_forward(x, position_ids):
        freqs = position_ids[:, :, None].to(torch.float64) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    rotary.forward = rotary_forward


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_matches_transformers(family, tmp_path):
    model, hf_cfg, ckpt = _build_hf(family, tmp_path)
    cfg, params = ref.load_checkpoint(ckpt)
    assert cfg.tie_word_embeddings == (family == "llama")
    g = torch.Generator().manual_seed(3)
    toks = torch.randint(0, cfg.vocab_size, (2, 14), generator=g)
    inputs, targets = toks[:, :-1], toks[:, 1:]

    # Unpatched transformers (float32 norm statistics and RoPE): agreement to ~1e-6.
    with torch.no_grad():
        hf_plain = model(input_ids=inputs).logits
    ref_logits, ref_loss, ref_grads = ref.loss_and_grads(cfg, params, inputs, targets)
    assert torch.allclose(hf_plain, ref_logits, atol=1e-4, rtol=0)

    _make_hf_float64(model, ref.rope_inv_freq(cfg))
    hf_logits = model(input_ids=inputs).logits
    scale = hf_logits.abs().max().item()
    assert scale > 0.1  # not trivially small
    err = (hf_logits - ref_logits).abs().max().item()
    assert err < 1e-10, f"logits differ by {err}"

    hf_loss = torch.nn.functional.cross_entropy(hf_logits.reshape(-1, cfg.vocab_size),
                                                targets.reshape(-1))
    assert abs(hf_loss.item() - ref_loss.item()) < 1e-12
    hf_loss.backward()
    hf_params = dict(model.named_parameters())
    assert set(ref_grads) <= set(hf_params)
    for name, grad in ref_grads.items():
        hg = hf_params[name].grad
        bound = 1e-10 * max(1.0, hg.abs().max().item())
        assert (hg - grad).abs().max().item() < bound, name


def test_llama3_inv_freq_regimes():
    """Our llama3 frequencies equal transformers' (computed there in float32) and the test
    config really exercises the three regimes of the formula."""
    model_cls, hf_cfg = _hf_models()["llama"]
    cfg = ref.config_from_dict(_kdtrain_config_json(hf_cfg, "llama"))
    ours = ref.rope_inv_freq(cfg)
    rotary = model_cls(hf_cfg).model.rotary_emb
    theirs = rotary.inv_freq.to(torch.float64)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0)
    base = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
    ratio = ours / base
    assert (ratio == 1.0).any()                                   # high frequencies kept
    assert torch.isclose(ratio, torch.tensor(1 / 8.0, dtype=torch.float64)).any()  # low: / factor
    assert ((ratio < 1.0) & (ratio > 1 / 8.0 + 1e-9)).any()       # interpolated band


def test_no_rope_scaling_is_plain_theta():
    cfg = tiny_config(rope_theta=1e6)
    expected = 1e6 ** -(torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    assert torch.equal(ref.rope_inv_freq(cfg), expected)


# ----------------------------------------------------------------------------- (b) finite differences

def _entries(shape, count, seed):
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(0, s)) for s in shape) for _ in range(count)]


@pytest.mark.parametrize("variant,activation", VARIANT_CASES)
def test_autograd_matches_finite_differences(variant, activation):
    cfg = tiny_config(variant, activation)
    params = random_params(cfg, seed=7)
    inputs, targets = random_tokens(cfg)
    _, _, grads = ref.loss_and_grads(cfg, params, inputs, targets)
    assert "model.layers.0.self_attn.alpha_ma" not in grads  # a buffer, never trained

    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.1.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.weight",
             "model.layers.1.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"]
    names += [n for n in grads if any(k in n for k in ("sinks", "alpha_proj", "self_attn.gate_proj"))]
    h = 1e-5
    for i, name in enumerate(names):
        for idx in _entries(params[name].shape, 3, seed=i):
            def loss_at(delta):
                p = dict(params)
                p[name] = params[name].clone()
                p[name][idx] += delta
                with torch.no_grad():
                    return ref.cross_entropy(ref.forward(cfg, p, inputs), targets).item()
            fd = (loss_at(h) - loss_at(-h)) / (2 * h)
            ad = grads[name][idx].item()
            assert abs(fd - ad) <= 1e-7 + 1e-6 * abs(ad), f"{variant}/{activation} {name}{idx}: fd {fd} ad {ad}"


def test_linear_clip_gradient_is_point_one_inside_zero_outside():
    z = torch.tensor([-7.0, -2.0, 0.0, 3.0, 6.0], dtype=torch.float64, requires_grad=True)
    a = ref.alpha_activation(z, "linear_clip")
    assert a.tolist() == [0.0, 0.3, 0.5, 0.8, 1.0]
    a.sum().backward()
    assert torch.allclose(z.grad, torch.tensor([0.0, 0.1, 0.1, 0.1, 0.0], dtype=torch.float64))


# ----------------------------------------------------------------------------- (c) reductions

def _baseline_logits(cfg_variant, params, inputs):
    base_cfg = tiny_config("baseline")
    base = {n: t for n, t in params.items() if n in ref.param_shapes(base_cfg)}
    return ref.forward(base_cfg, base, inputs)


def test_sink_at_minus_infinity_is_baseline():
    cfg = tiny_config("sink")
    params = random_params(cfg, seed=2)
    inputs, _ = random_tokens(cfg)
    with torch.no_grad():
        finite = ref.forward(cfg, params, inputs)
        for name in params:
            if name.endswith("sinks"):
                params[name] = torch.full_like(params[name], float("-inf"))
        at_inf = ref.forward(cfg, params, inputs)
        base = _baseline_logits(cfg, params, inputs)
    assert torch.equal(at_inf, base)
    assert (finite - base).abs().max() > 1e-3  # the sink does something when finite


@pytest.mark.parametrize("variant", ["affine", "affine-gated"])
def test_affine_with_alpha_one_is_baseline(variant):
    cfg = tiny_config(variant)
    params = random_params(cfg, seed=4)
    inputs, _ = random_tokens(cfg)
    forced = {"alpha": 1.0, "alpha_ma": 1.0, "gate": 1.0}
    with torch.no_grad():
        out = ref.forward(cfg, params, inputs, overrides=forced)
        free = ref.forward(cfg, params, inputs)
        base = _baseline_logits(cfg, params, inputs)
    assert torch.equal(out, base)
    assert (free - base).abs().max() > 1e-3


def test_gate_of_one_is_baseline():
    cfg = tiny_config("gated")
    params = random_params(cfg, seed=5)
    inputs, _ = random_tokens(cfg)
    with torch.no_grad():
        out = ref.forward(cfg, params, inputs, overrides={"gate": 1.0})
        free = ref.forward(cfg, params, inputs)
        base = _baseline_logits(cfg, params, inputs)
    assert torch.equal(out, base)
    assert (free - base).abs().max() > 1e-3


# ----------------------------------------------------------------------------- (d) attention mass

def _random_qkv(B=2, H=4, Hkv=2, T=9, D=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, Hkv, T, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, Hkv, T, D, generator=g, dtype=torch.float64)
    return q, k, v, g


@pytest.mark.parametrize("T", [9, 33])
def test_affine_attention_mass_under_each_divisor(T):
    """visible: every query's total weight is alpha_ma; sequence: alpha_i + (i + 1)(alpha_ma - alpha_i)/T
    (docs/model.md), so it varies per query and equals alpha_ma only on the last row."""
    q, k, v, g = _random_qkv(T=T)
    B, H, T, _ = q.shape
    alpha = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    alpha_ma = torch.rand(H, generator=g, dtype=torch.float64)
    ma = alpha_ma.view(1, H, 1)
    v_full = v.repeat_interleave(H // v.shape[1], dim=1)
    i1 = torch.arange(1, T + 1, dtype=torch.float64).view(1, 1, T)
    expected = {"visible": ma.expand_as(alpha), "sequence": alpha + i1 * (ma - alpha) / T}
    for divisor, want in expected.items():
        out, w = ref.attention_core(q, k, v, "affine", alpha=alpha, alpha_ma=alpha_ma,
                                    bias_divisor=divisor, return_weights=True)
        mass = w.sum(-1)
        assert torch.allclose(mass, want, atol=1e-13, rtol=0), divisor
        assert torch.all(w.triu(diagonal=1) == 0)  # no weight on future keys: still causal
        assert torch.allclose(out, w @ v_full, atol=1e-13, rtol=0)
    # The two readings agree on the last query (N = T = i + 1) and nowhere else in general.
    out_s = ref.attention_core(q, k, v, "affine", alpha=alpha, alpha_ma=alpha_ma, bias_divisor="sequence")
    out_v = ref.attention_core(q, k, v, "affine", alpha=alpha, alpha_ma=alpha_ma, bias_divisor="visible")
    assert torch.allclose(out_s[:, :, -1], out_v[:, :, -1], atol=1e-13, rtol=0)
    assert not torch.allclose(out_s[:, :, 0], out_v[:, :, 0], atol=1e-6)


def test_sink_mass_is_below_one():
    q, k, v, g = _random_qkv(seed=1)
    H = q.shape[1]
    sinks = torch.randn(H, generator=g, dtype=torch.float64)
    _, w = ref.attention_core(q, k, v, "sink", sinks=sinks, return_weights=True)
    mass = w.sum(-1)
    assert torch.all(mass < 1.0) and torch.all(mass > 0.0)
    # The first query sees one key: its mass is e^x / (e^x + e^s).
    x00 = (q[:, :, 0] * k.repeat_interleave(2, dim=1)[:, :, 0]).sum(-1) / 2.0
    expected = torch.sigmoid(x00 - sinks.view(1, H))
    assert torch.allclose(mass[:, :, 0], expected, atol=1e-14)


# ----------------------------------------------------------------------------- shards and CLI

@pytest.mark.parametrize("version", [1, 7])
def test_shard_roundtrip(tmp_path, version):
    tokens = np.array([0, 5, 65535, 17, 3] if version == 1 else [0, 100000, 151935], dtype=np.int64)
    path = str(tmp_path / "s.bin")
    ref.write_shard(path, tokens, version=version)
    assert np.array_equal(ref.read_shard(path), tokens)


def test_shard_rejects_bad_input(tmp_path):
    path = tmp_path / "s.bin"
    ref.write_shard(str(path), np.arange(10), version=1)
    blob = bytearray(path.read_bytes())
    path.write_bytes(blob[:-2])
    with pytest.raises(ValueError, match="header says 10 tokens"):
        ref.read_shard(str(path))
    blob[0:4] = np.array([1234], dtype="<i4").tobytes()
    path.write_bytes(blob)
    with pytest.raises(ValueError, match="bad magic"):
        ref.read_shard(str(path))


def test_cli_writes_logits_loss_and_grads(tmp_path):
    cfg_dict = dict(hidden_size=8, intermediate_size=12, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=4, vocab_size=256, tie_word_embeddings=True,
                    attention_bias=False, rope_theta=10000.0, rope_scaling=None,
                    attention_variant="affine-gated", alpha_activation="sigmoid")
    cfg = ref.config_from_dict(cfg_dict)
    params = random_params(cfg, seed=9)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(cfg_dict))
    save_file({n: t.float().numpy() for n, t in params.items()}, str(ckpt / "model.safetensors"))
    shard = str(tmp_path / "data.bin")
    ref.write_shard(shard, np.frombuffer(b"the quick brown fox jumps over the lazy dog", dtype=np.uint8))
    out = str(tmp_path / "out.safetensors")
    assert ref.main(["--checkpoint", str(ckpt), "--data", shard, "--batch-size", "2",
                     "--seq-len", "5", "--out", out, "--grads"]) == 0
    got = load_file(out)
    assert got["logits"].shape == (2, 5, 256) and got["logits"].dtype == np.float64
    expected_grads = {"grad." + n for n in ref.param_shapes(cfg) if ref.is_trainable(n)}
    assert set(got) == {"logits", "loss"} | expected_grads
    # The loss is the mean CE of next-token prediction on the first 2*5+1 bytes.
    tokens = np.frombuffer(b"the quick b", dtype=np.uint8).astype(np.int64)
    logits = torch.from_numpy(got["logits"]).reshape(10, 256)
    ce = torch.nn.functional.cross_entropy(logits, torch.from_numpy(tokens[1:11]))
    assert abs(ce.item() - float(got["loss"])) < 1e-12
    assert not os.path.exists(os.path.join(tmp_path, ".out.safetensors.tmp"))
