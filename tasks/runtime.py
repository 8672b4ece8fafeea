"""Per-process helpers the tasks share: suites rebuilt from their config dict (cached), problem orderings."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from whale_core.legs.scoring import validation_order
from whale_core.suites import Suite, SuiteConfig, load_suite
from whale_core.suites.base import Problem


@lru_cache(maxsize=8)
def _suite(key: str) -> Suite:
    return load_suite(SuiteConfig.model_validate(json.loads(key)))


def suite_of(cfg: dict[str, Any]) -> Suite:
    """The suite a config section describes (one instance per process and config)."""
    return _suite(json.dumps(cfg, sort_keys=True))


def problems_of(suite: Suite, split: str, n: int, seed: int) -> list[Problem]:
    """The first ``n`` problems of a split: val in the leg's seeded order (nested subsets), others as listed."""
    if split == "val":
        return validation_order(suite, seed)[:n]
    if split not in ("train", "test"):
        raise ValueError(f"split must be train, val or test (got {split!r})")
    return list(suite.problems(split))[:n]  # type: ignore[arg-type]
