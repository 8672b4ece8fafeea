"""The records a `whale compare` report is built from: one run's outcome, a variant's test-score statistics, a
difference between two variants and a variant's budget row.

Plain data with the few derived numbers they carry (`ModeStats.se`, `BudgetRow.within_budget`);
`whale_core.science.compare` computes them and writes the report, `whale_core.science.figures` draws them. Kept apart
so the figures need not import the report module (which imports the figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WHALE_MODES", "BudgetRow", "Difference", "ModeStats", "RunOutcome"]

WHALE_MODES: tuple[str, ...] = ("whale-adaptive", "whale-fixed")  # the modes that alternate; the rest are baselines


@dataclass
class RunOutcome:
    """One (variant, seed) run as the report needs it. ``status``: ``finished`` or ``failed`` (then ``error``)."""

    label: str
    mode: str
    seed: int
    run_id: str
    status: str
    test_final: float | None = None
    test_initial: float | None = None
    test_n: int = 0
    budget: dict[str, Any] = field(default_factory=dict)
    final_harness: str | None = None
    final_checkpoint: str | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)
    switches: list[tuple[float, str]] = field(default_factory=list)
    legs: list[str] = field(default_factory=list)
    error: str | None = None
    source: str = "run"  # "run": computed by this invocation; "archive": a finished run found from an earlier one

    @property
    def ok(self) -> bool:
        return self.status == "finished" and self.test_final is not None


@dataclass(frozen=True)
class ModeStats:
    """Test scores of one variant over its finished seeds. ``sd`` is the sample sd (0 with one seed)."""

    label: str
    mode: str
    n: int
    failed: int
    mean: float
    sd: float
    values: tuple[float, ...]
    initial_mean: float
    test_n: int = 0  # test problems per run (the smallest over its seeds)

    @property
    def se(self) -> float:
        """Standard error of ``mean``: seed-to-seed spread plus the test set's own sampling noise (a score is a
        proportion over ``test_n`` problems), so identical seeds on a small test set do not look exact."""
        if not self.n:
            return math.nan
        p = min(max(self.mean, 0.0), 1.0)
        sampling = p * (1 - p) / (self.n * self.test_n) if self.test_n else 0.0
        return math.sqrt(self.sd**2 / self.n + sampling)


@dataclass(frozen=True)
class Difference:
    """``label`` minus ``baseline`` in mean test score, with the standard error of the difference (`ModeStats.se`)."""

    label: str
    baseline: str
    diff: float
    se: float


@dataclass(frozen=True)
class BudgetRow:
    """Completions per leg kind for one variant: means over its finished seeds, plus the worst case vs the caps."""

    label: str
    n: int
    weights: float
    harness: float
    eval: float
    total: int
    max_spent: int
    harness_share: float
    harness_cap: float | None
    weights_legs: float
    harness_legs: float

    @property
    def within_budget(self) -> bool:
        return self.max_spent <= self.total
