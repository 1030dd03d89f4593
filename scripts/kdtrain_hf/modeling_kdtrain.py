# coding=utf-8
"""PyTorch modeling code of kdtrain's models for Hugging Face transformers.

The decoder is LLaMA / Qwen2's (docs/model.md): pre-norm, RMSNorm, rotary embeddings
(rotate_half convention, optional Llama-3 frequency scaling), grouped-query
attention, optional q/k/v bias, SwiGLU MLP, tied or untied LM head. Tensor
names are Hugging Face's, so kdtrain's safetensors load as they are.

The attention core implements docs/model.md's variants for query i, keys j <= i:
  baseline      O = P V, P = softmax(q k^T / sqrt(d)) over visible keys
  sink          p_ij = e^{x_ij} / (sum_j e^{x_ij} + e^{s_h}), s_h = self_attn.sinks[h]
  affine        O_i = alpha_i (P V)_i + beta_i sum_{j<=i} V_j,
                alpha_i = phi(x_i W_alpha^T) (phi = linear_clip or sigmoid),
                beta_i = (alpha_ma - alpha_i) / N, alpha_ma the saved buffer
  gated         O' = O * sigmoid(x W_g^T) per channel, before o_proj
  affine-gated  affine, then the gate
alpha_ma is a buffer: kdtrain updates it during training; here it is used as
saved (evaluation). N is what config.json says (docs/model.md, "The affine divisor
at inference"):
  affine_bias_divisor "visible"                      N_i = i + 1, the keys query i sees
  "sequence", affine_inference_n "train_length"      N = affine_train_length, the
                                                     train.seq_len the weights trained at
  "sequence", affine_inference_n "keys" (or no       N = the keys of the call: the
    affine_train_length)                             prompt's in one forward, past + 1
                                                     in a cached generation step
Under the first two a row's output depends only on its prefix; under the last it
depends on the length of the call.

Numerics: rotary tables in float64 rounded to the model dtype; attention
(torch's scaled_dot_product_attention) and the affine mix in float32 (float64
for a float64 model); the rest in the model dtype. A 2-D attention_mask of 0/1 removes padded keys
from the softmax, from the prefix sum and from an N that counts keys.

KV cache: with use_cache (the default) a forward returns a transformers
DynamicCache holding each layer's rotated keys and values, and a later forward
given it as past_key_values runs only the new tokens, at positions past + t;
so generate() costs one new token per step. Queries attend to every cached key
(the sink adds its denominator term as without the cache), and the affine
prefix sum and N run over the cached values too. Where a row depends only on its
prefix (every variant but affine with N = the keys of the call), the logits equal
those of a full forward over the whole sequence (scripts/tests/test_hf_modeling.py
checks it stepwise). With N = the keys of the call they do not once the model has
two or more layers: each step divides by past + 1 while the cached states of the
earlier tokens were computed with the shorter calls' N; the model warns once when
it generates so. Positions are position_ids when given, else
past + t; generate() derives them from the attention mask as transformers'
LLaMA does.
"""
import math
import warnings
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel

try:  # transformers >= 4.50 no longer mixes generation into PreTrainedModel
    from transformers.generation import GenerationMixin
except ImportError:  # pragma: no cover - old transformers
    GenerationMixin = object

from .configuration_kdtrain import KdtrainConfig
from .variants import affine_fixed_n, features as variant_features


def rope_inverse_frequencies(config) -> list:
    """inv_freq[i] = theta^(-2i/D), rescaled as Llama 3 does when rope_scaling says so."""
    D = config.head_dim
    inv_freq = [1.0 / (config.rope_theta ** (2 * i / D)) for i in range(D // 2)]
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return inv_freq
    factor = float(scaling["factor"])
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_len / low
    high_freq_wavelen = old_len / high
    out = []
    for f in inv_freq:
        wavelen = 2 * math.pi / f
        if wavelen < high_freq_wavelen:
            out.append(f)
        elif wavelen > low_freq_wavelen:
            out.append(f / factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def alpha_activation(z: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "sigmoid":
        return torch.sigmoid(z)
    # linear_clip: 0 for z <= -5, 0.1 z + 0.5 between, 1 for z >= 5
    return torch.clamp(0.1 * z + 0.5, min=0.0, max=1.0)


def affine_mix(out: torch.Tensor, v: torch.Tensor, alpha: torch.Tensor, alpha_ma: torch.Tensor,
               bias_divisor: str = "sequence", key_valid: Optional[torch.Tensor] = None,
               past: int = 0, fixed_n: Optional[int] = None) -> torch.Tensor:
    """The affine variant's output (docs/model.md): alpha * out + beta * prefix(v) with
    beta = (alpha_ma - alpha) / N, in the dtype of `out`. out (B, H, T, D) is P V
    of the T new queries; v (B, H, S, D) every key's value, S = past + T (the
    prefix sum runs over cached keys too, the new rows are the last T); alpha
    (B, H, T) activated; alpha_ma (H); key_valid (B, S) or None. N (docs/model.md):
    `sequence` divides by fixed_n when given (the training length), else by the
    keys of the call, past + current (a padded row's real keys); `visible` by the
    keys each query sees. scripts/peers/torch_attention.py uses it too."""
    T, S = out.shape[2], v.shape[2]
    work = out.dtype
    if bias_divisor == "sequence" and fixed_n:
        key_valid_f = None if key_valid is None else key_valid.to(work)[:, None, :, None]
        v_prefix = (v if key_valid_f is None else v * key_valid_f).cumsum(dim=2)[:, :, past:]
        beta = (alpha_ma.view(1, -1, 1) - alpha) / float(fixed_n)
        return alpha[..., None] * out + beta[..., None] * v_prefix
    if key_valid is None:
        v_prefix = v.cumsum(dim=2)[:, :, past:]
        if bias_divisor == "sequence":
            n_keys = torch.full((1, 1, 1), float(S), dtype=work, device=out.device)
        else:
            n_keys = torch.arange(past + 1, S + 1, dtype=work, device=out.device).view(1, 1, T)
    else:
        kv = key_valid.to(work)  # (B, S)
        v_prefix = (v * kv[:, None, :, None]).cumsum(dim=2)[:, :, past:]
        if bias_divisor == "sequence":
            n_keys = kv.sum(dim=-1).clamp(min=1.0).view(kv.shape[0], 1, 1)
        else:
            n_keys = kv.cumsum(dim=-1).clamp(min=1.0)[:, None, past:]
    beta = (alpha_ma.view(1, -1, 1) - alpha) / n_keys
    return alpha[..., None] * out + beta[..., None] * v_prefix


class KdtrainRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        x = hidden_states.to(torch.float32) if input_dtype != torch.float64 else hidden_states
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(input_dtype)


class KdtrainRotaryEmbedding(nn.Module):
    """cos/sin tables for given positions, computed in float64 (no buffers, so
    nothing to load or to place on a device)."""

    def __init__(self, config: KdtrainConfig):
        super().__init__()
        self._inv_freq = rope_inverse_frequencies(config)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        inv_freq = torch.tensor(self._inv_freq, dtype=torch.float64, device=position_ids.device)
        angles = position_ids.to(torch.float64)[..., None] * inv_freq  # (B, T, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (B, T, D)
        return angles.cos().to(dtype), angles.sin().to(dtype)


class KdtrainMLP(nn.Module):
    def __init__(self, config: KdtrainConfig):
        super().__init__()
        C, F_ = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class KdtrainAttention(nn.Module):
    def __init__(self, config: KdtrainConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.variant = config.attention_variant
        self.activation = config.alpha_activation
        self.bias_divisor = config.affine_bias_divisor
        self.fixed_n = affine_fixed_n(config.affine_bias_divisor, config.affine_inference_n,
                                      config.affine_train_length)
        C, H, Hkv, D = (config.hidden_size, config.num_attention_heads,
                        config.num_key_value_heads, config.head_dim)
        self.num_heads, self.num_kv_heads, self.head_dim = H, Hkv, D
        self.scale = 1.0 / math.sqrt(D)
        bias = bool(config.attention_bias)
        self.q_proj = nn.Linear(C, H * D, bias=bias)
        self.k_proj = nn.Linear(C, Hkv * D, bias=bias)
        self.v_proj = nn.Linear(C, Hkv * D, bias=bias)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        features = variant_features(self.variant)
        self.has_sink, self.has_affine, self.has_gate = features.sink, features.affine, features.gate
        if self.has_sink:
            self.sinks = nn.Parameter(torch.zeros(H))
        if self.has_affine:
            self.alpha_proj = nn.Linear(C, H, bias=False)
            # Running mean of alpha from training (docs/model.md); saved, never trained.
            self.register_buffer("alpha_ma", torch.zeros(H), persistent=True)
        if self.has_gate:
            self.gate_proj = nn.Linear(C, H * D, bias=False)

    def _softmax_pv(self, q, k, v, key_valid, past):
        """P V for causal attention (plus the sink in the denominator), through
        torch's scaled_dot_product_attention, which keeps no (T, S) scores on its
        fused paths (the plain causal case takes no mask at all). Query t sits at
        position past + t and sees keys 0 .. past + t of the S = past + T keys.
        The sink is one extra key whose score is s_h (an additive mask column)
        and whose value is 0: it adds e^{s_h} to the denominator and nothing to
        the sum."""
        B, H, T, D = q.shape
        S = k.shape[2]
        if not self.has_sink and key_valid is None and (past == 0 or T == 1):
            # One new query sees every key; a whole sequence is plain causal.
            return F.scaled_dot_product_attention(q, k, v, is_causal=past == 0 and T > 1, scale=self.scale)
        query_pos = torch.arange(past, S, device=q.device)[:, None]
        key_pos = torch.arange(S, device=q.device)[None, :]
        visible = (key_pos <= query_pos)[None, None]  # (1, 1, T, S)
        if key_valid is not None:
            # Padded keys are invisible; a query always sees itself so no row is empty.
            itself = key_pos == query_pos
            visible = (visible & key_valid[:, None, None, :]) | itself
        if not self.has_sink:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=self.scale)
        rows = visible.shape[0]
        bias = torch.zeros(visible.shape, dtype=q.dtype, device=q.device).masked_fill(~visible, float("-inf"))
        sink = self.sinks.to(q.dtype).view(1, H, 1, 1).expand(rows, H, T, 1)
        bias = torch.cat((bias.expand(rows, H, T, S), sink), dim=-1)  # (B or 1, H, T, S + 1)
        zero = q.new_zeros(B, H, 1, D)
        return F.scaled_dot_product_attention(q, torch.cat((k, zero), dim=2), torch.cat((v, zero), dim=2),
                                              attn_mask=bias, scale=self.scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                key_valid: Optional[torch.Tensor], cache: Optional[Cache] = None,
                past: int = 0) -> torch.Tensor:
        """x holds the T new tokens; `cache` (when given) the `past` tokens before
        them, and it receives theirs. key_valid (B, past + T) or None."""
        B, T, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, Hkv, D).transpose(1, 2)
        c, s = cos[:, None], sin[:, None]  # (B, 1, T, D)
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # (B, Hkv, past + T, D)
            if k.shape[2] != past + T:
                raise ValueError("kdtrain models take a DynamicCache (a growing cache), not a "
                                 f"pre-sized one: the cache returned {k.shape[2]} keys for {past} + {T}")
        if Hkv != H:  # query head h reads kv head h // (H / Hkv)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)

        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        q, k, v = q.to(work), k.to(work), v.to(work)
        out = self._softmax_pv(q, k, v, key_valid, past)  # (B, H, T, D)

        if self.has_affine:
            alpha = alpha_activation(self.alpha_proj(x).to(work), self.activation).transpose(1, 2)  # (B, H, T)
            out = affine_mix(out, v, alpha, self.alpha_ma.to(work), self.bias_divisor, key_valid, past,
                             self.fixed_n)

        out = out.transpose(1, 2).reshape(B, T, H * D).to(x.dtype)
        if self.has_gate:
            out = out * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(out)


class KdtrainDecoderLayer(nn.Module):
    def __init__(self, config: KdtrainConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = KdtrainRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = KdtrainAttention(config, layer_idx)
        self.post_attention_layernorm = KdtrainRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = KdtrainMLP(config)

    def forward(self, h, cos, sin, key_valid, cache=None, past=0):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, key_valid, cache, past)
        return h + self.mlp(self.post_attention_layernorm(h))


class KdtrainPreTrainedModel(PreTrainedModel):
    config_class = KdtrainConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["KdtrainDecoderLayer"]

    def _init_weights(self, module):
        # As LLaMA / Qwen2; sinks ~ N(0, std) as kdtrain init does. alpha_ma is
        # left alone: it is either loaded or zero from construction.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=std)
        elif isinstance(module, KdtrainRMSNorm):
            module.weight.data.fill_(1.0)
        elif isinstance(module, KdtrainAttention) and module.has_sink:
            module.sinks.data.normal_(mean=0.0, std=std)


class KdtrainModel(KdtrainPreTrainedModel):
    def __init__(self, config: KdtrainConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(KdtrainDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = KdtrainRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = KdtrainRotaryEmbedding(config)
        # An affine model whose N is the keys of each call: from two layers on, a cached
        # step differs from a full forward (the module docstring); said once per model.
        self._warn_on_cache = (variant_features(config.attention_variant).affine
                               and config.affine_bias_divisor == "sequence"
                               and config.num_hidden_layers >= 2
                               and affine_fixed_n(config.affine_bias_divisor, config.affine_inference_n,
                                                  config.affine_train_length) is None)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, output_hidden_states=None,
                **kwargs) -> BaseModelOutputWithPast:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        h = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        B, T = h.shape[:2]
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if past_key_values is not None and not isinstance(past_key_values, Cache):
            raise ValueError("past_key_values must be a transformers Cache (DynamicCache), "
                             f"got {type(past_key_values).__name__}")
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if past > 0 and self._warn_on_cache:
            self._warn_on_cache = False
            warnings.warn(
                "kdtrain: this affine model divides its bias by the keys of each call (affine_bias_divisor "
                "'sequence' with affine_inference_n 'keys' or no affine_train_length), so with a KV cache its "
                f"{self.config.num_hidden_layers} layers give logits that differ from a full forward over the "
                "same tokens; affine_inference_n='train_length' with the training length in "
                "affine_train_length makes them equal", stacklevel=3)
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=h.device).unsqueeze(0).expand(B, T)
        key_valid = None
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
            if attention_mask.shape[1] < past + T:
                raise ValueError(f"attention_mask covers {attention_mask.shape[1]} tokens; the cache and "
                                 f"the input hold {past} + {T}")
            key_valid = attention_mask[:, -(past + T):].to(torch.bool)
        cos, sin = self.rotary_emb(position_ids, h.dtype)
        hidden_states = (h,) if output_hidden_states else None
        for layer in self.layers:
            h = layer(h, cos, sin, key_valid, past_key_values, past)
            if output_hidden_states:
                hidden_states = hidden_states + (h,)
        h = self.norm(h)
        if output_hidden_states:
            hidden_states = hidden_states[:-1] + (h,)
        return BaseModelOutputWithPast(last_hidden_state=h, past_key_values=past_key_values if use_cache else None,
                                       hidden_states=hidden_states)


class KdtrainForCausalLM(KdtrainPreTrainedModel, GenerationMixin):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config: KdtrainConfig):
        super().__init__(config)
        self.model = KdtrainModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None,
                                      use_cache=None, **kwargs):
        # With a cache, only the tokens it does not hold yet are run. Positions
        # count real tokens, as transformers' LLaMA does, so a left-padded prompt
        # generates what it would unpadded.
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = None
        if attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        return {"input_ids": input_ids[:, past:], "attention_mask": attention_mask,
                "position_ids": position_ids, "past_key_values": past_key_values, "use_cache": use_cache}

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, cache_position=None,
                logits_to_keep: Union[int, torch.Tensor] = 0, **kwargs
                ) -> Union[Tuple, CausalLMOutputWithPast]:
        # cache_position is accepted and ignored: positions follow the cache's length.
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=past_key_values,
                             inputs_embeds=inputs_embeds, use_cache=use_cache,
                             output_hidden_states=output_hidden_states)
        h = outputs.last_hidden_state
        if isinstance(logits_to_keep, int):
            h = h[:, -logits_to_keep:, :] if logits_to_keep > 0 else h
        else:
            h = h[:, logits_to_keep, :]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].float().reshape(-1, self.config.vocab_size)
            shift_labels = labels[..., 1:].reshape(-1).to(shift_logits.device)
            loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        if not return_dict:
            out = (logits,) + ((outputs.past_key_values,) if outputs.past_key_values is not None else ())
            out = out + ((outputs.hidden_states,) if output_hidden_states else ())
            return ((loss,) + out) if loss is not None else out
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=outputs.past_key_values,
                                      hidden_states=outputs.hidden_states, attentions=None)
