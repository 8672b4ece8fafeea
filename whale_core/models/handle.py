"""What every layer shares about a loaded model: the `Policy` record and `PolicyLoadError`.

The loader (`whale_core.models.policy.load_policy`) builds them; rollouts, the tiny model's build and named models
use them without importing the loader (which imports those modules in turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.errors import WhaleError

if TYPE_CHECKING:
    import torch

__all__ = ["Policy", "PolicyLoadError"]


class PolicyLoadError(WhaleError, RuntimeError):
    """A model or adapter could not be loaded; the message names the path or id and what to do."""


@dataclass
class Policy:
    """A loaded causal LM ready for generation (and, with ``trainable=True`` at load, for training).

    ``model`` is a ``PreTrainedModel`` (or a ``PeftModel`` wrapping one); ``tokenizer`` pads on the left and has a
    pad token. ``policy_id`` is a stable content hash (see the module docstring).
    """

    model: Any
    tokenizer: Any
    policy_id: str
    base_path: Path
    adapter_path: Path | None
    device: torch.device
    merged: bool = False  # the adapter was merged into the weights (inference only: `load_policy(merge_adapter=True)`)
