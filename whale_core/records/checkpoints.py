"""A trained policy on disk: the `Checkpoint` record a weights leg writes next to its adapter (or full model) as
``whale_checkpoint.json``, and how it is saved and identified.

A checkpoint's id is the sha256 of its trained tensors' contents (names, dtypes, shapes, bytes; the adapter's tensors
for LoRA), so the same weights get the same id wherever they were trained or moved: the archive, the MLflow lineage
and Prefect's cache keys use it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CHECKPOINT_FILE = "whale_checkpoint.json"

__all__ = ["CHECKPOINT_FILE", "Checkpoint", "save_checkpoint", "tensor_hash"]


@dataclass
class Checkpoint:
    """A trained policy on disk. ``id``: sha256 of the trained weights' contents (adapter tensors for LoRA).

    ``base_model``: the model dir the adapter applies to (LoRA) or the base the full model descends from.
    ``step``: GRPO steps in the whole lineage (parent's step + this leg's).
    """

    id: str
    path: str
    parent_id: str | None
    harness_sha: str
    base_model: str
    step: int
    is_lora: bool

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        """Read ``whale_checkpoint.json`` of a checkpoint dir; ``path`` is where the dir is now (it may have moved)."""
        data = json.loads((Path(path) / CHECKPOINT_FILE).read_text())
        return cls(**{**data, "path": str(Path(path).resolve())})


def tensor_hash(files: Sequence[Path]) -> str:
    """sha256 over the tensors of ``files`` (sorted by file, then by tensor name)."""
    import torch
    from safetensors.torch import load_file

    h = hashlib.sha256()
    for f in sorted(files):
        tensors = load_file(str(f))
        for name in sorted(tensors):
            t = tensors[name].contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_checkpoint(
    model: Any, tokenizer: Any, final_dir: Path, harness_sha: str, parent: Checkpoint | None, adapter_base: str,
    policy: Any, steps_done: int,
) -> Checkpoint:  # fmt: skip
    """Save the trained adapter (or model) and tokenizer; write ``whale_checkpoint.json`` (id = hash of tensors)."""
    from peft import PeftModel

    shutil.rmtree(final_dir, ignore_errors=True)
    final_dir.mkdir(parents=True)
    is_lora = isinstance(model, PeftModel)
    model.save_pretrained(str(final_dir))
    tokenizer.save_pretrained(str(final_dir))
    weights = list(final_dir.glob("*.safetensors"))
    if not weights:
        raise RuntimeError(f"no safetensors weights were written to {final_dir}")
    full_base = parent.base_model if parent else str(policy.base_path)
    ckpt = Checkpoint(
        id=tensor_hash(weights), path=str(final_dir), parent_id=parent.id if parent else None,
        harness_sha=harness_sha, base_model=adapter_base if is_lora else full_base,
        step=(parent.step if parent else 0) + steps_done, is_lora=is_lora,
    )  # fmt: skip
    (final_dir / CHECKPOINT_FILE).write_text(json.dumps(asdict(ckpt), indent=1, sort_keys=True))
    return ckpt
