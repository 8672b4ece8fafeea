"""Small references that travel between orchestration steps instead of models or datasets.

A `PolicyRef` names a policy by content (``checkpoint_id``: the base model's fingerprint, or a trained checkpoint's
content hash) plus where to load it from; a `HarnessRef` carries a harness's canonical text and sha. Both are frozen,
JSON-able dataclasses, so Prefect can hash them into cache keys and persist them as results.

A trained checkpoint's dir under ``$WHALE_HOME`` is carried relative to the home (`whale_core.records.portable`), so a
moved home still loads it; `PolicyRef.load` and `checkpoint_from_dir` resolve it against the current home. Old refs
(persisted Prefect results of runs made before) carry absolute paths: they load as they are, and since the ref's
fields are unchanged their cache keys are too, so such a run still resumes from its cache.

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
from whale_core.records.portable import from_home, to_home


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
    checkpoint dir or None; ``checkpoint_id``: the identity used in the archive, lineage and cache keys. A trained
    checkpoint's dir (``adapter``, or ``model`` when not ``is_base``) is relative to the home when it lies under it;
    `adapter_dir` and `model_dir` give them absolute."""

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
        where = to_home(ckpt.path)
        if ckpt.is_lora:
            return cls(model=base.model, adapter=where, checkpoint_id=ckpt.id, device=base.device, is_base=False)
        return cls(model=where, adapter=None, checkpoint_id=ckpt.id, device=base.device, is_base=False)

    @property
    def adapter_dir(self) -> str | None:
        """The LoRA adapter's dir, absolute (under the current home when stored relative), or None."""
        return None if self.adapter is None else from_home(self.adapter)

    @property
    def model_dir(self) -> str:
        """``model`` as loadable: a trained full model's dir absolute; a base model's name or dir unchanged."""
        full = not self.is_base and self.adapter is None  # a full fine-tune: the checkpoint dir is the model
        return from_home(self.model) if full else self.model

    def load(self, trainable: bool = False) -> Any:
        """The policy; for inference (not ``trainable``) with its adapter merged into the weights (faster rollouts)."""
        from whale_core.models.policy import load_policy

        policy = load_policy(
            self.model_dir, adapter=self.adapter_dir, device=self.device, trainable=trainable,
            merge_adapter=not trainable,
        )  # fmt: skip
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
    """Read the `checkpoints.Checkpoint` a leg saved (``whale_checkpoint.json``); a relative ``path`` is under the
    current home. Its ``path`` is where the dir is now (the file records where it was written)."""
    import json

    from whale_core.records.checkpoints import CHECKPOINT_FILE, Checkpoint

    where = Path(from_home(path)).resolve()
    data = json.loads((where / CHECKPOINT_FILE).read_text())
    fields = Checkpoint.__dataclass_fields__
    return Checkpoint(**{**{k: v for k, v in data.items() if k in fields}, "path": str(where)})
