"""Models: the policy (a local HF causal LM + optional LoRA adapter) and the built-in tiny model.

Importing this package is cheap: torch, transformers and peft are imported inside the functions that need them.

    from whale_core.models import load_policy, TinyRecipe
    policy = load_policy("tiny")                     # installs the shipped tiny model on first use
    policy = load_policy("/path/to/hf-model", adapter="/path/to/lora")
    policy = load_policy("smollm2-135m")             # a named model (whale_core.models.named), once installed
                                                     # with `whale models install` (whale_core.models.install)

Training the tiny model from scratch is `whale_core.models.tiny_build` (not imported here).
"""

from whale_core.models.handle import Policy, PolicyLoadError
from whale_core.models.policy import base_model_id, load_policy, select_device
from whale_core.models.tiny import TinyRecipe, install_tiny_model, make_tokenizer, tiny_model_dir

__all__ = [
    "Policy",
    "PolicyLoadError",
    "TinyRecipe",
    "base_model_id",
    "install_tiny_model",
    "load_policy",
    "make_tokenizer",
    "select_device",
    "tiny_model_dir",
]
