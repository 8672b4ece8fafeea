"""The `Suite` protocol and the `Problem` record: what every task family provides.

A suite is a task family: deterministic, seeded, disjoint train/val/test problem lists; a scorer
``score(answer, problem) -> [0, 1]``; a one-paragraph description for proposers; and a seed harness text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class Problem:
    """One instance: a stable id, the fields a harness template may use, and the gold answer (a string)."""

    id: str
    fields: Mapping[str, Any]
    answer: str
    meta: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"digits": 3}; never shown to the model


@runtime_checkable
class Suite(Protocol):
    """A task family.

    Contract:
    - ``problems(split)`` is deterministic for a given suite config (seed included); the three splits are
      disjoint (no two problems of different splits share their ``fields``).
    - ``score(answer, problem)`` returns a float in [0, 1]; ``answer`` is the harness-parsed answer or ``None``
      when parsing failed (which scores 0). It never raises on a bad answer.
    - ``description`` is one paragraph for proposers: what the problems are and what counts as correct. It
      never contains gold answers.
    - ``seed_harness`` is the harness text (YAML) the suite ships as the starting point.
    """

    name: str
    description: str
    seed_harness: str

    def problems(self, split: Split) -> Sequence[Problem]: ...

    def score(self, answer: str | None, problem: Problem) -> float: ...
