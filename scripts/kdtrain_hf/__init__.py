"""kdtrain's Hugging Face modeling code (configuration_kdtrain.py, modeling_kdtrain.py).

`kdtrain export` embeds the two files in its binary and writes them next to the
exported config.json (docs/export.md); importing this package registers the
classes with transformers' Auto* factories for in-process use.
"""
from .configuration_kdtrain import KdtrainConfig
from .modeling_kdtrain import KdtrainForCausalLM, KdtrainModel


def register_auto_classes():
    """Lets AutoConfig / AutoModelForCausalLM build model_type "kdtrain" without trust_remote_code."""
    from transformers import AutoConfig, AutoModelForCausalLM

    AutoConfig.register("kdtrain", KdtrainConfig, exist_ok=True)
    AutoModelForCausalLM.register(KdtrainConfig, KdtrainForCausalLM, exist_ok=True)


__all__ = ["KdtrainConfig", "KdtrainForCausalLM", "KdtrainModel", "register_auto_classes"]
