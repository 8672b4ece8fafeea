"""Models: the policy (a local HF causal LM + optional LoRA adapter) and the built-in tiny model.

Importing this package is cheap: torch, transformers and peft are imported inside the functions that need them.

    from whale_core.models import load_policy, build_tiny_model, TinyRecipe
    policy = load_policy("tiny")                     # installs the shipped tiny model on first use
    policy = load_policy("/path/to/hf-model", adapter="/path/to/lora")
    policy = load_policy("smollm2-135m")             # a named model (whale_core.models.named), once installed
                                                     # with `whale models install` (whale_core.models.install)
"""

from whale_core.models.policy import Policy, PolicyLoadError, base_model_id, load_policy, select_device
from whale_core.models.tiny import TinyRecipe, build_tiny_model, make_tokenizer, tiny_model_dir
from whale_core.models.warmup import WarmupFormat

__all__ = [
    "Policy",
    "PolicyLoadError",
    "TinyRecipe",
    "WarmupFormat",
    "base_model_id",
    "build_tiny_model",
    "load_policy",
    "make_tokenizer",
    "select_device",
    "tiny_model_dir",
]
