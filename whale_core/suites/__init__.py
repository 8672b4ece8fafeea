"""Suites: task families with deterministic, disjoint train/val/test problems, a scorer and a seed harness.

Built-ins: ``arith`` (same-length addition), ``sort`` (sort a short list of small integers), ``jsonl`` (the user's
own problems from a JSONL file); any other suite class loads by dotted path (see `registry`).
"""

from whale_core.suites.base import SPLITS, Problem, Split, Suite
from whale_core.suites.registry import BUILTIN_SUITES, DEFAULT_SIZES, SplitSizes, SuiteConfig, SuiteError, load_suite

__all__ = [
    "BUILTIN_SUITES",
    "DEFAULT_SIZES",
    "SPLITS",
    "Problem",
    "Split",
    "SplitSizes",
    "Suite",
    "SuiteConfig",
    "SuiteError",
    "load_suite",
]
