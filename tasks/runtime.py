"""Per-process helpers the tasks share: suites rebuilt from their config (one instance per process and config)."""

from __future__ import annotations

from functools import lru_cache

from whale_core.suites import Suite, SuiteConfig, load_suite


@lru_cache(maxsize=8)
def _suite(key: str) -> Suite:
    return load_suite(SuiteConfig.model_validate_json(key))


def suite_of(cfg: SuiteConfig) -> Suite:
    """The suite a config section describes (one instance per process and config)."""
    return _suite(cfg.model_dump_json())
