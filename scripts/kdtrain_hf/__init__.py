"""kdtrain's Hugging Face modeling code (configuration_kdtrain.py, modeling_kdtrain.py)
and the variant table they share with the other scripts (variants.py).

`kdtrain export` embeds the files in its binary and writes them next to the
exported config.json (docs/export.md); importing this package registers the
classes with transformers' Auto* factories for in-process use. The modeling
classes load on first use, so `kdtrain_hf.variants` needs neither torch nor
transformers.
"""


def register_auto_classes():
    """Lets AutoConfig / AutoModelForCausalLM build model_type "kdtrain" without trust_remote_code."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from .configuration_kdtrain import KdtrainConfig
    from .modeling_kdtrain import KdtrainForCausalLM

    AutoConfig.register("kdtrain", KdtrainConfig, exist_ok=True)
    AutoModelForCausalLM.register(KdtrainConfig, KdtrainForCausalLM, exist_ok=True)


def __getattr__(name):
    if name == "KdtrainConfig":
        from .configuration_kdtrain import KdtrainConfig
        return KdtrainConfig
    if name in ("KdtrainForCausalLM", "KdtrainModel"):
        from . import modeling_kdtrain
        return getattr(modeling_kdtrain, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KdtrainConfig", "KdtrainForCausalLM", "KdtrainModel", "register_auto_classes"]
