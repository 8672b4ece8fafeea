"""The policy: a causal LM (a local Hugging Face model dir or the built-in tiny model) plus an optional LoRA adapter.

`load_policy()` is the one way WHALE gets a model (the `Policy` it returns and `PolicyLoadError` are defined in
`whale_core.models.handle`, which the layers below the loader import). It never reaches a hub: a local directory is
loaded with ``local_files_only=True``; a string that looks like a hub id (``org/name``) with no such local directory is
an error that tells the user to download the model themselves and pass the directory.

Identity (`Policy.policy_id`) is content-based and cheap: the base id is a short sha256 over ``config.json`` and, per
weight file, its name, size and the sha256 of its first and last MiB (a multi-GB file is never hashed whole; two
checkpoints that differ only in the middle of a weight file would collide — an accepted simplification, since
training changes every tensor). With an adapter the id is a sha256 over the base id and the adapter's files.

Simplified: one device per policy (no sharding, no quantization); dtype float32 on CPU/MPS, bf16 on CUDA when the
GPU supports it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.models.handle import Policy, PolicyLoadError

if TYPE_CHECKING:
    import torch

__all__ = ["Policy", "PolicyLoadError", "base_model_id", "check_model", "load_policy", "select_device"]

_MIB = 1 << 20
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def select_device(pref: str = "auto") -> torch.device:
    """``auto`` picks cuda > mps > cpu; an explicit ``cpu``/``cuda``/``cuda:N``/``mps`` is honored when this machine
    has it, else a `PolicyLoadError` (not torch's assertion deep inside the first ``.to()``)."""
    import torch

    if pref != "auto":
        try:
            dev = torch.device(pref)
        except RuntimeError as exc:
            raise PolicyLoadError(f"unknown device {pref!r}: use auto, cpu, cuda, cuda:N or mps") from exc
        if dev.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
                raise PolicyLoadError(f"device {pref!r} is not available: {why} (use cpu or auto)")
            if dev.index is not None and dev.index >= count:
                raise PolicyLoadError(
                    f"device {pref!r} is not available: {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})"
                )
        elif dev.type == "mps":
            mps = getattr(torch.backends, "mps", None)
            if mps is None or not mps.is_available():
                raise PolicyLoadError(f"device {pref!r} is not available: no Apple MPS here (use cpu or auto)")
        elif dev.type != "cpu":
            raise PolicyLoadError(f"unsupported device {pref!r}: use auto, cpu, cuda, cuda:N or mps")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _file_fingerprint(path: Path) -> str:
    """name, size, sha256 of the first and last MiB — constant cost whatever the file size."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with path.open("rb") as f:
        h.update(f.read(_MIB))
        if size > _MIB:
            f.seek(max(_MIB, size - _MIB))
            h.update(f.read(_MIB))
    return f"{path.name}:{size}:{h.hexdigest()}"


def base_model_id(model_dir: Path) -> str:
    """Short content id of a local HF model dir: sha256 over config.json + each weight file's fingerprint."""
    model_dir = Path(model_dir)
    h = hashlib.sha256()
    config = model_dir / "config.json"
    h.update(config.read_bytes() if config.exists() else b"")
    weights = sorted(p for p in model_dir.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    if not weights:
        raise PolicyLoadError(f"no weight files (*.safetensors, *.bin) in model directory {model_dir}")
    for p in weights:
        h.update(_file_fingerprint(p).encode())
    return h.hexdigest()[:16]


def _adapter_id(base_id: str, adapter_dir: Path) -> str:
    h = hashlib.sha256(base_id.encode())
    files = sorted(p for p in adapter_dir.iterdir() if p.is_file() and p.name.endswith((*_WEIGHT_SUFFIXES, ".json")))
    for p in files:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _resolve_model_dir(model: str | Path, home: Path | None) -> Path:
    if str(model) == "tiny":
        from whale_core.models.tiny import install_tiny_model

        found = install_tiny_model(home)  # cached, or the shipped copy installed
        if found is None:  # WHALE ships no copy (an install without the package data): train it here, as always
            from whale_core.models.tiny_build import build_tiny_model

            found = build_tiny_model(home)
        return found
    if isinstance(model, str):  # a named model (`whale models list`): its installed dir, or an install hint
        from whale_core.models.named import resolve_named

        named = resolve_named(model, home)
        if named is not None:
            return named
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise PolicyLoadError(f"{path} is a directory but has no config.json: not a Hugging Face model directory")
        return path.resolve()
    if isinstance(model, str) and _HUB_ID.match(model):
        raise PolicyLoadError(
            f"model {model!r} looks like a hub id, but WHALE never downloads models. Download it yourself "
            f"(e.g. `hf download {model} --local-dir models/{model.split('/')[-1]}`) and pass that directory."
        )
    raise PolicyLoadError(
        f"model {str(model)!r} is neither 'tiny', a named model (`whale models list`) nor an existing local model "
        "directory"
    )


def _checked_adapter_dir(adapter: str | Path) -> Path:
    """The adapter's resolved directory, checked before the base model is loaded (a typo fails in milliseconds)."""
    path = Path(adapter).expanduser().resolve()
    if not path.is_dir():
        raise PolicyLoadError(f"adapter directory {path} does not exist")
    if not (path / "adapter_config.json").exists():
        raise PolicyLoadError(f"adapter {path} has no adapter_config.json: not a PEFT adapter directory")
    return path


def check_model(
    model: str | Path, device: str = "auto", adapter: str | Path | None = None, home: Path | None = None
) -> Path:
    """What `load_policy` checks before it loads any weights (model reference, adapter directory, device), alone: a
    command runs it before it starts a flow, so a typo is one error line, not a failed flow run. Returns the model
    directory; raises `PolicyLoadError`."""
    path = _resolve_model_dir(model, home)
    if adapter is not None:
        _checked_adapter_dir(adapter)
    select_device(device)
    return path


def _dtype_for(device: torch.device) -> torch.dtype:
    import torch

    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def load_policy(
    model: str | Path = "tiny",
    adapter: str | Path | None = None,
    device: str = "auto",
    home: Path | None = None,
    trainable: bool = False,
    merge_adapter: bool = False,
) -> Policy:
    """Load a policy. ``model``: ``"tiny"`` (built and cached under ``home``) or a local HF model directory.

    ``adapter``: an optional PEFT LoRA adapter directory (trainable when ``trainable``). The model is put in eval
    mode unless ``trainable``. ``merge_adapter`` (inference only): fold the adapter into a copy of the weights
    (PEFT's ``merge_and_unload``), so generation runs plain linear layers — an unmerged LoRA layer adds two small
    matmuls and Python per call, measured at half a rollout's time on SmolLM2 on a CPU (docs/real-model.md); the
    outputs agree up to float rounding. Raises `PolicyLoadError` naming the path/id on any loading problem.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = _resolve_model_dir(model, home)
    adapter_path = _checked_adapter_dir(adapter) if adapter is not None else None
    dev = select_device(device)
    net: Any
    try:
        tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
        net = AutoModelForCausalLM.from_pretrained(base_path, local_files_only=True, dtype=_dtype_for(dev))
    except (OSError, ValueError) as exc:
        raise PolicyLoadError(f"could not load model from {base_path}: {exc}") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise PolicyLoadError(f"tokenizer in {base_path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    if net.generation_config is not None and net.generation_config.pad_token_id is None:
        net.generation_config.pad_token_id = tokenizer.pad_token_id
    pid = base_model_id(base_path)
    if adapter_path is not None:
        from peft import PeftModel

        try:
            net = PeftModel.from_pretrained(net, adapter_path, is_trainable=trainable)
        except (OSError, ValueError, RuntimeError) as exc:
            raise PolicyLoadError(f"could not load adapter {adapter_path} onto {base_path}: {exc}") from exc
        pid = _adapter_id(pid, adapter_path)
        if merge_adapter and not trainable:
            net = net.merge_and_unload()
    net.to(dev)
    if trainable:
        net.train()
    else:
        net.eval()
        for p in net.parameters():
            p.requires_grad_(False)
    return Policy(
        model=net, tokenizer=tokenizer, policy_id=pid, base_path=base_path, adapter_path=adapter_path, device=dev,
        merged=adapter_path is not None and merge_adapter and not trainable,
    )  # fmt: skip
