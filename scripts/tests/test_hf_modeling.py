"""scripts/kdtrain_hf/modeling_kdtrain.py on its own (no kdtrain binary needed):
the baseline equals transformers' LLaMA / Qwen2, each variant's attention equals
a per-query float64 loop written from docs/model.md (affine under both bias divisors),
the sink limit is the baseline, left padding with an attention mask leaves the real
tokens' logits alone, and a KV cache gives what a full forward over the keys so far
gives (under `sequence` with affine_inference_n "keys", N is the keys of the call:
past + current; with "train_length" N is fixed and every row depends only on its
prefix, so the cache and padding change nothing, for any number of layers)."""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from kdtrain_hf import KdtrainConfig, KdtrainForCausalLM  # noqa: E402
from kdtrain_hf.variants import AFFINE_BIAS_DIVISORS, ATTENTION_VARIANTS as VARIANTS, features  # noqa: E402

# The affine N: "sequence" = the keys of the call (affine_inference_n "keys"),
# "sequence-fixed" = N fixed at the training length TRAIN_LENGTH, "visible" = i + 1.
DIVISORS = ["sequence", "sequence-fixed", "visible"]
assert set(AFFINE_BIAS_DIVISORS) < set(DIVISORS)
TRAIN_LENGTH = 16
# Every variant, the affine ones under each N.
VARIANT_DIVISORS = [(v, d) for v in VARIANTS for d in (DIVISORS if features(v).affine else DIVISORS[:1])]
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def kdtrain_config(variant="baseline", activation="linear_clip", bias=False, tied=True, kv=2,
                   divisor="sequence", layers=2):
    return KdtrainConfig(vocab_size=53, hidden_size=24, intermediate_size=40, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=kv, head_dim=6,
                         max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=500.0,
                         rope_scaling=LLAMA3, attention_bias=bias, tie_word_embeddings=tied,
                         attention_variant=variant, alpha_activation=activation,
                         affine_bias_divisor="sequence" if divisor == "sequence-fixed" else divisor,
                         affine_inference_n="train_length" if divisor == "sequence-fixed" else "keys",
                         affine_train_length=TRAIN_LENGTH)


def randomize_(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".sinks") or name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("alpha_proj.weight"):
                p.copy_(4.0 * torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith("alpha_ma"):
                b.copy_(0.2 + 0.7 * torch.rand(b.shape, generator=g))
    return model


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_baseline_equals_transformers(family):
    if family == "llama":
        ref_config = transformers.LlamaConfig(
            vocab_size=53, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=6, max_position_embeddings=64, rms_norm_eps=1e-5,
            rope_theta=500.0, rope_scaling=LLAMA3, tie_word_embeddings=True, attn_implementation="eager")
        ref = transformers.LlamaForCausalLM(ref_config)
        ours = KdtrainForCausalLM(kdtrain_config())
    else:
        ref_config = transformers.Qwen2Config(
            vocab_size=53, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e6,
            tie_word_embeddings=False, attn_implementation="eager")
        ref = transformers.Qwen2ForCausalLM(ref_config)
        ours = KdtrainForCausalLM(KdtrainConfig(
            vocab_size=53, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e6,
            attention_bias=True, tie_word_embeddings=False))
    randomize_(ref, 0).eval()
    assert ours.load_state_dict(ref.state_dict(), strict=True)
    ours.eval()
    ids = torch.randint(0, 53, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (ref(ids).logits - ours(ids).logits).abs().max().item()
    assert diff < 1e-5


def naive_attention(attn, x, position_ids, config):
    """The attention of docs/model.md one query at a time, float64, from the module's weights."""
    x = x.double()
    B, T, C = x.shape
    H, Hkv, D = config.num_attention_heads, config.num_key_value_heads, config.head_dim

    def lin(layer, inp):
        y = inp @ layer.weight.double().T
        return y + layer.bias.double() if layer.bias is not None else y

    q = lin(attn.q_proj, x).view(B, T, H, D)
    k = lin(attn.k_proj, x).view(B, T, Hkv, D)
    v = lin(attn.v_proj, x).view(B, T, Hkv, D)
    inv_freq = torch.tensor(attn_inv_freq(config), dtype=torch.float64)

    def rope(t, pos):
        ang = pos * inv_freq
        c, s = torch.cos(ang), torch.sin(ang)
        a, b = t[: D // 2], t[D // 2:]
        return torch.cat((a * c - b * s, b * c + a * s))

    out = torch.zeros(B, T, H, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(T):
                qi = rope(q[b, i, h], float(position_ids[b, i]))
                ks = [rope(k[b, j, g], float(position_ids[b, j])) for j in range(i + 1)]
                x_ij = torch.stack([qi @ kj for kj in ks]) / math.sqrt(D)
                e = torch.exp(x_ij)
                denom = e.sum() + (torch.exp(attn.sinks[h].double()) if attn.has_sink else 0.0)
                o = sum(e[j] / denom * v[b, j, g] for j in range(i + 1))
                if attn.has_affine:
                    z = lin(attn.alpha_proj, x[b, i])[h]
                    if config.alpha_activation == "sigmoid":
                        a = 1.0 / (1.0 + torch.exp(-z))
                    else:  # linear_clip
                        a = torch.clamp(0.1 * z + 0.5, 0.0, 1.0)
                    if config.affine_bias_divisor == "visible":
                        n_keys = i + 1
                    elif config.affine_inference_n == "train_length":
                        n_keys = config.affine_train_length
                    else:
                        n_keys = T
                    beta = (attn.alpha_ma[h].double() - a) / n_keys
                    o = a * o + beta * v[b, : i + 1, g].sum(0)
                out[b, i, h] = o
    out = out.reshape(B, T, H * D)
    if attn.has_gate:
        out = out * torch.sigmoid(lin(attn.gate_proj, x))
    return out @ attn.o_proj.weight.double().T


def attn_inv_freq(config):
    from kdtrain_hf.modeling_kdtrain import rope_inverse_frequencies

    return rope_inverse_frequencies(config)


@pytest.mark.parametrize("variant,activation,divisor",
                         [(v, "linear_clip", d) for v, d in VARIANT_DIVISORS] +
                         [("affine", "sigmoid", "sequence"), ("affine-gated", "sigmoid", "visible"),
                          ("affine-gated", "sigmoid", "sequence-fixed")])
def test_attention_matches_spec_loop(variant, activation, divisor):
    config = kdtrain_config(variant, activation, bias=True, divisor=divisor)
    model = randomize_(KdtrainForCausalLM(config), 3).double().eval()
    attn = model.model.layers[0].self_attn
    x = torch.randn(2, 11, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    pos = torch.arange(11).expand(2, 11)
    cos, sin = model.model.rotary_emb(pos, torch.float64)
    with torch.no_grad():
        ours = attn(x, cos, sin, None)
        want = naive_attention(attn, x, pos, config)
    assert (ours - want).abs().max().item() < 1e-10


def test_sink_to_minus_infinity_is_baseline():
    base = randomize_(KdtrainForCausalLM(kdtrain_config("baseline")), 5).eval()
    sink = KdtrainForCausalLM(kdtrain_config("sink")).eval()
    sink.load_state_dict(base.state_dict(), strict=False)
    with torch.no_grad():
        for layer in sink.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
    ids = torch.randint(0, 53, (1, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert (base(ids).logits - sink(ids).logits).abs().max().item() < 1e-6


@pytest.mark.parametrize("variant", VARIANTS)
def test_left_padding_with_mask_leaves_real_tokens_alone(variant):
    model = randomize_(KdtrainForCausalLM(kdtrain_config(variant)), 7).eval()
    ids = torch.randint(0, 53, (1, 9), generator=torch.Generator().manual_seed(8))
    pad = 4
    padded = torch.cat((torch.zeros(1, pad, dtype=torch.long), ids), dim=1)
    mask = torch.cat((torch.zeros(1, pad, dtype=torch.long), torch.ones(1, 9, dtype=torch.long)), dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        alone = model(ids).logits
        masked = model(padded, attention_mask=mask, position_ids=positions).logits[:, pad:]
    assert (alone - masked).abs().max().item() < 1e-5


def test_config_refuses_unknown_variant_and_rope():
    with pytest.raises(ValueError, match="attention_variant"):
        KdtrainConfig(attention_variant="softmax1")
    with pytest.raises(ValueError, match="yarn"):
        KdtrainConfig(rope_scaling={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(ValueError, match="affine_bias_divisor"):
        KdtrainConfig(attention_variant="affine", affine_bias_divisor="keys")


def test_config_without_the_divisor_key_reads_as_visible():
    """config.json written before the key existed: kdtrain divided by the visible keys then."""
    assert KdtrainConfig(attention_variant="affine").affine_bias_divisor == "visible"


def test_the_two_divisors_differ_and_agree_where_they_must():
    """Same weights: the last position (N = T = i + 1) agrees, earlier ones do not."""
    seq = randomize_(KdtrainForCausalLM(kdtrain_config("affine", divisor="sequence")), 9).double().eval()
    vis = KdtrainForCausalLM(kdtrain_config("affine", divisor="visible")).double().eval()
    vis.load_state_dict(seq.state_dict())
    ids = torch.randint(0, 53, (1, 10), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        a, b = seq(ids).logits, vis(ids).logits
    assert (a[:, 0] - b[:, 0]).abs().max().item() > 1e-3
    # Layer 2 sees layer 1's outputs at every position, so only a one-layer model agrees at
    # the end; here check the attention module of layer 0 directly.
    x = torch.randn(1, 10, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    pos = torch.arange(10).expand(1, 10)
    cos, sin = seq.model.rotary_emb(pos, torch.float64)
    with torch.no_grad():
        o_seq = seq.model.layers[0].self_attn(x, cos, sin, None)
        o_vis = vis.model.layers[0].self_attn(x, cos, sin, None)
    assert (o_seq[:, -1] - o_vis[:, -1]).abs().max().item() < 1e-12
    assert (o_seq[:, :-1] - o_vis[:, :-1]).abs().max().item() > 1e-3


# ---- KV cache: a forward given the cache of the tokens before equals a full forward
# over the tokens so far (its last rows). Every case but affine under `sequence` is
# causal and so also equals the full forward over the whole sequence. Under `sequence`
# the affine N is the keys of the call, past + current (docs/model.md): a row depends on how
# many keys the call holds, so a token's hidden state after layer 1 changes as the
# sequence grows, and the keys/values a cache keeps for layers >= 2 are those of the
# shorter call that made them. A cached forward equals a full one there only for a
# one-layer model (its cached k/v come from the embeddings), which is what the tests
# use; test_sequence_divisor_cache_keeps_the_shorter_calls_states pins the rest down.
# float64, so the only differences are the summation orders of SDPA over S keys vs
# T keys: 1e-10 is ~1e6 ulp of headroom.

def stepwise_logits(model, ids, chunks, mask=None, positions=None):
    """Runs ids in the given chunk sizes through one DynamicCache; returns the
    logits of every position, concatenated."""
    cache, out, start = None, [], 0
    for n in chunks:
        kwargs = {"past_key_values": cache, "use_cache": True}
        if mask is not None:
            kwargs["attention_mask"] = mask[:, :start + n]
        if positions is not None:
            kwargs["position_ids"] = positions[:, start:start + n]
        r = model(ids[:, start:start + n], **kwargs)
        cache, start = r.past_key_values, start + n
        assert cache.get_seq_length() == start
        out.append(r.logits)
    return torch.cat(out, dim=1)


def prefix_logits(model, ids, chunks, mask=None, positions=None):
    """What stepwise_logits must give: per chunk, a cache-free forward over every token up
    to the chunk's end, its last rows."""
    out, start = [], 0
    for n in chunks:
        end = start + n
        kwargs = {"use_cache": False}
        if mask is not None:
            kwargs["attention_mask"] = mask[:, :end]
        if positions is not None:
            kwargs["position_ids"] = positions[:, :end]
        out.append(model(ids[:, :end], **kwargs).logits[:, start:end])
        start = end
    return torch.cat(out, dim=1)


def is_causal(variant, divisor):
    """Whether every row depends only on its prefix: all but affine with N = the call's keys."""
    return "affine" not in variant or divisor != "sequence"


def layers_for_cache(variant, divisor):
    """Three layers where a cache is exact, one for affine with N = the call's keys
    (comment above)."""
    return 3 if is_causal(variant, divisor) else 1


@pytest.mark.parametrize("variant,divisor", VARIANT_DIVISORS)
def test_kv_cache_equals_full_forward_stepwise(variant, divisor):
    config = kdtrain_config(variant, bias=True, divisor=divisor, layers=layers_for_cache(variant, divisor))
    model = randomize_(KdtrainForCausalLM(config), 11).double().eval()
    ids = torch.randint(0, 53, (2, 14), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        for chunks in ([1] * 14, [5, 1, 3, 1, 4]):
            steps = stepwise_logits(model, ids, chunks)
            assert (steps - prefix_logits(model, ids, chunks)).abs().max().item() < 1e-10
            # The whole-sequence forward: equal when rows are causal, different (N = T vs
            # the keys so far) where the affine bias divides by the call's keys.
            assert ((steps - full).abs().max().item() < 1e-10) == is_causal(variant, divisor)


@pytest.mark.parametrize("variant,divisor", VARIANT_DIVISORS)
def test_kv_cache_with_left_padding_equals_full_forward(variant, divisor):
    config = kdtrain_config(variant, divisor=divisor, layers=layers_for_cache(variant, divisor))
    model = randomize_(KdtrainForCausalLM(config), 13).double().eval()
    ids = torch.randint(1, 53, (2, 12), generator=torch.Generator().manual_seed(14))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :3] = 0  # row 0: 3 pad tokens on the left
    ids[0, :3] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    chunks = [6, 1, 1, 2, 1, 1]
    with torch.no_grad():
        want = prefix_logits(model, ids, chunks, mask, positions)
        steps = stepwise_logits(model, ids, chunks, mask, positions)
        # Row 0 alone, unpadded: a padded row's N counts its real keys only.
        alone = prefix_logits(model, ids[:1, 3:], [3, 1, 1, 2, 1, 1])
    real = mask.bool()
    assert (steps - want)[real].abs().max().item() < 1e-10
    assert (steps[:1, 3:] - alone).abs().max().item() < 1e-10


@pytest.mark.parametrize("variant,divisor", [("baseline", "sequence"), ("sink", "sequence"),
                                             ("affine", "sequence"), ("affine-gated", "sequence"),
                                             ("affine", "sequence-fixed"), ("affine-gated", "visible")])
def test_generate_uses_the_cache_and_matches_uncached(variant, divisor):
    config = kdtrain_config(variant, divisor=divisor, layers=layers_for_cache(variant, divisor))
    model = randomize_(KdtrainForCausalLM(config), 15).eval()
    prompt = torch.randint(0, 53, (1, 6), generator=torch.Generator().manual_seed(16))
    seen = []
    hook = model.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=True)
    hook.remove()
    # The prompt once, then one token per step: no step re-runs the prefix.
    assert seen == [6] + [1] * 7
    with torch.no_grad():
        uncached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)


def test_sequence_divisor_cache_keeps_the_shorter_calls_states():
    """Two layers, affine, `sequence`: a cached step differs from a full forward over the
    tokens so far, because layer 2's cached k/v of earlier tokens were computed with the
    N of their own call. The first call (nothing cached) equals it exactly."""
    model = randomize_(KdtrainForCausalLM(kdtrain_config("affine", divisor="sequence")), 19).double().eval()
    ids = torch.randint(0, 53, (1, 8), generator=torch.Generator().manual_seed(20))
    chunks = [4, 1, 1, 2]
    with torch.no_grad(), pytest.warns(UserWarning, match="differ from a full forward"):
        steps = stepwise_logits(model, ids, chunks)
        want = prefix_logits(model, ids, chunks)
    assert (steps[:, :4] - want[:, :4]).abs().max().item() < 1e-10
    assert (steps[:, 4:] - want[:, 4:]).abs().max().item() > 1e-6


def test_a_presized_cache_is_refused():
    model = randomize_(KdtrainForCausalLM(kdtrain_config("affine")), 17).eval()
    ids = torch.randint(0, 53, (1, 4), generator=torch.Generator().manual_seed(18))
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad(), pytest.raises(ValueError, match="DynamicCache"):
        model(ids, past_key_values=cache, use_cache=True)


# ---- N fixed at the training length (affine_inference_n "train_length"): a row depends
# only on its prefix whatever the call's length, so right padding without a mask (what
# lm-eval does) and the cache change nothing, and at exactly the training length the
# model is the one that trained (N = T).

@pytest.mark.parametrize("variant,divisor", [(v, d) for v, d in VARIANT_DIVISORS if "affine" in v])
def test_right_padding_without_a_mask_changes_no_score_unless_n_is_the_calls(variant, divisor):
    model = randomize_(KdtrainForCausalLM(kdtrain_config(variant, divisor=divisor, layers=3)), 21).double().eval()
    ids = torch.randint(1, 53, (2, 11), generator=torch.Generator().manual_seed(22))
    ids[1, 7:] = 0  # row 1 holds 7 real tokens, then padding as lm-eval pads a batch
    with torch.no_grad():
        batch = model(ids).logits
        alone = model(ids[1:, :7]).logits
    diff = (batch[1:, :7] - alone).abs().max().item()
    assert (diff < 1e-10) == is_causal(variant, divisor), diff


def test_fixed_n_equals_the_calls_keys_at_the_training_length_only():
    fixed = randomize_(KdtrainForCausalLM(kdtrain_config("affine-gated", divisor="sequence-fixed", layers=3)),
                       23).double().eval()
    keys = KdtrainForCausalLM(kdtrain_config("affine-gated", divisor="sequence", layers=3)).double().eval()
    keys.load_state_dict(fixed.state_dict())
    ids = torch.randint(0, 53, (2, TRAIN_LENGTH), generator=torch.Generator().manual_seed(24))
    with torch.no_grad():
        assert (fixed(ids).logits - keys(ids).logits).abs().max().item() < 1e-12
        short = ids[:, :TRAIN_LENGTH // 2]
        assert (fixed(short).logits - keys(short).logits).abs().max().item() > 1e-3


def test_fixed_n_with_no_training_length_divides_by_the_calls_keys():
    """An export without affine_train_length (written before the key) keeps the old N."""
    config = kdtrain_config("affine", divisor="sequence-fixed")
    config.affine_train_length = None
    model = randomize_(KdtrainForCausalLM(config), 25).double().eval()
    ref = KdtrainForCausalLM(kdtrain_config("affine", divisor="sequence")).double().eval()
    ref.load_state_dict(model.state_dict())
    ids = torch.randint(0, 53, (1, 9), generator=torch.Generator().manual_seed(26))
    with torch.no_grad():
        assert (model(ids).logits - ref(ids).logits).abs().max().item() == 0.0


@pytest.mark.parametrize("divisor,layers,warns", [("sequence", 2, True), ("sequence", 1, False),
                                                  ("sequence-fixed", 2, False), ("visible", 2, False)])
def test_cached_generation_warns_once_where_it_differs_from_a_full_forward(divisor, layers, warns):
    import warnings

    model = randomize_(KdtrainForCausalLM(kdtrain_config("affine", divisor=divisor, layers=layers)), 27).eval()
    prompt = torch.randint(0, 53, (1, 5), generator=torch.Generator().manual_seed(28))
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        model.generate(prompt, max_new_tokens=4, do_sample=False, use_cache=True)
        model.generate(prompt, max_new_tokens=4, do_sample=False, use_cache=True)
    ours = [w for w in caught if "kdtrain:" in str(w.message)]
    assert len(ours) == (1 if warns else 0), [str(w.message) for w in ours]


def test_config_refuses_a_bad_inference_n_or_training_length():
    with pytest.raises(ValueError, match="affine_inference_n"):
        KdtrainConfig(attention_variant="affine", affine_inference_n="sequence")
    with pytest.raises(ValueError, match="affine_train_length"):
        KdtrainConfig(attention_variant="affine", affine_train_length=0)
