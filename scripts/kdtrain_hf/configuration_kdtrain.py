# coding=utf-8
"""Hugging Face configuration of kdtrain's attention variants (docs/model.md).

`kdtrain export` copies this file, modeling_kdtrain.py and variants.py next to config.json
for every variant other than `baseline`, so that

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

loads the model. The keys mirror LlamaConfig / Qwen2Config; kdtrain adds
`attention_variant`, `alpha_activation`, `alpha_momentum`, `affine_bias_divisor` (absent:
"visible", what kdtrain wrote before the key existed), `affine_inference_n` and
`affine_train_length` (the N of the "sequence" divisor: "train_length" fixes it at the
train.seq_len the weights trained at, "keys" uses the keys of each call; absent length:
the keys of each call) and `base_model_type` (the architecture the model was shaped
after: "llama" or "qwen2").
"""
from transformers.configuration_utils import PretrainedConfig

from .variants import (AFFINE_BIAS_DIVISOR_BEFORE_KEY, AFFINE_BIAS_DIVISORS, AFFINE_INFERENCE_NS, ALPHA_ACTIVATIONS,
                       ATTENTION_VARIANTS)


class KdtrainConfig(PretrainedConfig):
    model_type = "kdtrain"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=None,
        head_dim=None,
        hidden_act="silu",
        max_position_embeddings=2048,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        rope_scaling=None,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        attention_variant="baseline",
        alpha_activation="linear_clip",
        alpha_momentum=0.9,
        affine_bias_divisor=AFFINE_BIAS_DIVISOR_BEFORE_KEY,
        affine_inference_n=AFFINE_INFERENCE_NS[0],
        affine_train_length=None,
        base_model_type="llama",
        use_cache=True,
        **kwargs,
    ):
        # Every argument but these is an attribute of the same name (the defaults stand once,
        # in the signature); the head counts and head_dim default from the others.
        not_fields = ("self", "kwargs", "__class__", "tie_word_embeddings")
        fields = {k: v for k, v in locals().items() if k not in not_fields}
        if num_key_value_heads is None:
            fields["num_key_value_heads"] = num_attention_heads
        if head_dim is None:
            fields["head_dim"] = hidden_size // num_attention_heads
        for name, value in fields.items():
            setattr(self, name, value)
        self._check()
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def _check(self):
        for key, choices in (("attention_variant", ATTENTION_VARIANTS), ("alpha_activation", ALPHA_ACTIVATIONS),
                             ("affine_bias_divisor", AFFINE_BIAS_DIVISORS),
                             ("affine_inference_n", AFFINE_INFERENCE_NS)):
            value = getattr(self, key)
            if value not in choices:
                raise ValueError(f"config.json: {key} {value!r} is not one of {choices}")
        if self.affine_train_length is not None and (
                not isinstance(self.affine_train_length, int) or self.affine_train_length < 1):
            raise ValueError(
                f"config.json: affine_train_length {self.affine_train_length!r} must be a positive integer or null"
            )
        if self.hidden_act != "silu":
            raise ValueError(f"config.json: hidden_act {self.hidden_act!r} is not supported (only silu)")
        if self.mlp_bias:
            raise ValueError("config.json: mlp_bias true is not supported")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError("config.json: num_key_value_heads must divide num_attention_heads")
        if self.head_dim % 2 != 0:
            raise ValueError("config.json: head_dim must be even for rotary embeddings")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("default", "llama3"):
                raise ValueError(
                    f"config.json: rope_scaling type {kind!r} is not supported (expected default or llama3)"
                )
