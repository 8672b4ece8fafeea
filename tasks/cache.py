"""Content-addressed cache keys for WHALE's Prefect tasks.

A key is the sha256 of a canonical JSON of what determines the task's result (harness sha, checkpoint id, config
section, seed, iteration, ...) plus the task's source code — never the flow run id — so a resumed or retried run gets
completed work back as ``Cached`` and a code change invalidates it.

Prefect logs and *silently disables caching* when a key function raises. WHALE's key function raises `CacheKeyError`
for anything it cannot hash canonically (a model, a tensor, an open file) and, in addition, records the failure in
`KEY_FAILURES`; the test suite fails any test that leaves a failure there (``tests/conftest.py``), so a task whose
inputs stop being hashable is caught loudly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEY_FAILURES: list[str] = []


class CacheKeyError(TypeError):
    """An input cannot be turned into a canonical cache key."""


def _canonical(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dc__": type(value).__name__, **_canonical(dataclasses.asdict(value), where)}
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return _canonical(value.model_dump(mode="json"), where)
    if isinstance(value, dict):
        return {str(k): _canonical(v, f"{where}.{k}") for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, frozenset | set):
        return sorted(_canonical(v, where) for v in value)
    raise CacheKeyError(f"cannot build a content cache key from {where} of type {type(value).__name__}")


def content_key(task_name: str, source: str, inputs: dict[str, Any]) -> str:
    """sha256 over the task name, its source code and the canonical inputs."""
    payload = {"task": task_name, "source": hashlib.sha256(source.encode()).hexdigest(), "inputs": {}}
    for name, value in sorted(inputs.items()):
        payload["inputs"][name] = _canonical(value, name)  # type: ignore[index]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def content_cache_key(*exclude: str) -> Callable[[Any, dict[str, Any]], str]:
    """A Prefect ``cache_key_fn`` hashing every parameter except ``exclude`` (e.g. paths that do not change the
    result, such as an output directory that is itself derived from the hashed inputs)."""

    def key_fn(context: Any, parameters: dict[str, Any]) -> str:
        task = context.task
        try:
            source = inspect.getsource(task.fn)
        except (OSError, TypeError):
            source = task.fn.__qualname__
        inputs = {k: v for k, v in parameters.items() if k not in exclude}
        try:
            return content_key(task.name, source, inputs)
        except CacheKeyError as exc:
            KEY_FAILURES.append(f"{task.name}: {exc}")
            raise

    return key_fn
