"""Dotted keys of nested mappings: `flatten`, the one rule that turns ``{"a": {"b": 1}}`` into ``{"a.b": 1}``.

A leaf module (it imports nothing of WHALE), so that every layer can share the rule: the run config
(`whale_core.config`, which re-exports it), MLflow params (`whale_core.records.lineage`), config diffs
(`whale_core.science.compare`) and harness diffs (`whale_core.proposers.base`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["flatten"]


def flatten(
    data: Mapping[Any, Any], prefix: str = "", *, leaf: Callable[[str, Any], bool] | None = None
) -> dict[str, Any]:
    """Nested mappings -> dotted keys: ``{"a": {"b": 1}, "c": [1]}`` -> ``{"a.b": 1, "c": [1]}``.

    The one rule for MLflow params (``records.lineage.flatten_params`` converts and redacts the values), config
    diffs (``science.compare.config_diff``) and harness diffs (``proposers.base.changed_fields``). Keys are
    ``str(key)`` joined by ``.``, after ``prefix`` (prepended verbatim, e.g. ``"weights."``); lists and other
    non-mapping values are leaves (kept whole); an empty mapping yields no key. ``leaf(key, value)``, asked for each
    mapping value with its own (undotted) key, keeps that mapping whole as one leaf when true.
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and not (leaf is not None and leaf(str(key), value)):
            out.update(flatten(value, name + ".", leaf=leaf))
        else:
            out[name] = value
    return out
