"""Small references that travel between orchestration steps instead of models or datasets.

A `PolicyRef` names a policy by content (``checkpoint_id``: the base model's fingerprint, or a trained checkpoint's
content hash) plus where to load it from; a `HarnessRef` carries a harness's canonical text and sha. Both are frozen,
JSON-able dataclasses, so Prefect can hash them into cache keys and persist them as results.

`load_cached` keeps the last few *inference* policies of this process in memory (loading a real model per task would
dominate the run); training always loads a fresh, trainable copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale_core.harness import Harness


@dataclass(frozen=True)
class HarnessRef:
    sha: str
    text: str
    parent: str | None = None

    @classmethod
    def of(cls, harness: Harness) -> HarnessRef:
        return cls(harness.sha, harness.text, harness.parent)

    def load(self) -> Harness:
        h = Harness.from_text(self.text, parent=self.parent)
        if h.sha != self.sha:
            raise ValueError(f"harness text does not hash to {self.sha[:12]} (got {h.sha[:12]}): corrupted record")
        return h


@dataclass(frozen=True)
class PolicyRef:
    """``model``: ``tiny`` or a model dir (a full fine-tune's checkpoint dir is a model dir); ``adapter``: a LoRA
    checkpoint dir or None; ``checkpoint_id``: the identity used in the archive, lineage and cache keys."""

    model: str
    adapter: str | None
    checkpoint_id: str
    device: str = "auto"
    is_base: bool = True

    @classmethod
    def base(cls, model: str, device: str = "auto") -> PolicyRef:
        """The untrained policy; its id is the base model's content fingerprint (builds the tiny model if needed)."""
        from whale_core.models.policy import _resolve_model_dir, base_model_id

        path = _resolve_model_dir(model, None)
        return cls(model=model, adapter=None, checkpoint_id=f"base-{base_model_id(path)}", device=device)

    @classmethod
    def of_checkpoint(cls, base: PolicyRef, ckpt: Any) -> PolicyRef:
        """The policy a `checkpoints.Checkpoint` describes (LoRA adapter on the base, or a full model dir)."""
        if ckpt.is_lora:
            return cls(
                model=base.model, adapter=str(ckpt.path), checkpoint_id=ckpt.id, device=base.device, is_base=False
            )
        return cls(model=str(ckpt.path), adapter=None, checkpoint_id=ckpt.id, device=base.device, is_base=False)

    def load(self, trainable: bool = False) -> Any:
        from whale_core.models.policy import load_policy

        policy = load_policy(self.model, adapter=self.adapter, device=self.device, trainable=trainable)
        policy.policy_id = self.checkpoint_id
        return policy


_CACHE: OrderedDict[PolicyRef, Any] = OrderedDict()
_LOCK = threading.Lock()
_CACHE_SIZE = 2


def load_cached(ref: PolicyRef) -> Any:
    """An inference policy for ``ref``, shared within this process (LRU of two)."""
    with _LOCK:
        if ref in _CACHE:
            _CACHE.move_to_end(ref)
            return _CACHE[ref]
        policy = ref.load(trainable=False)
        _CACHE[ref] = policy
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return policy


def checkpoint_from_dir(path: str | Path) -> Any:
    """Read the `checkpoints.Checkpoint` a leg saved (``whale_checkpoint.json``)."""
    import json

    from whale_core.records.checkpoints import CHECKPOINT_FILE, Checkpoint

    data = json.loads((Path(path) / CHECKPOINT_FILE).read_text())
    fields = Checkpoint.__dataclass_fields__
    return Checkpoint(**{k: v for k, v in data.items() if k in fields})
