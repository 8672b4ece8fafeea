"""Scoring harnesses for the harness leg: one harness's per-problem results on a slice of the validation ordering
(`ScoreBlock`, `score_block`), and the per-harness cache over nested prefixes of that ordering that successive
halving promotes candidates through (`Scorer`: it rolls out only the problems a harness has not seen, charges the
budget, and hands the rollouts to ``roll_many`` — sequential by default, a Prefect task per block in a flow).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.suites.base import Problem, Suite

__all__ = ["BudgetStop", "RollMany", "ScoreBlock", "Scorer", "problems_of", "score_block", "validation_order"]


@dataclass
class ScoreBlock:
    """Per-problem results of one harness on a contiguous slice ``[start, end)`` of the validation ordering."""

    scores: list[float]
    prompt_tokens: list[int]
    completions: int
    traces: list[dict[str, Any]]


RollMany = Callable[[list[tuple[Harness, int, int]]], list[ScoreBlock]]


def score_block(
    policy: Any, harness: Harness, suite: Suite, problems: Sequence[Problem], *, batch_size: int, seed: int
) -> ScoreBlock:
    """Roll out ``harness`` on ``problems`` (demos from the train split) and keep what the leg needs."""
    from whale_core.rollout import rollout

    result = rollout(
        policy,
        harness,
        suite,
        problems,
        demo_pool=suite.problems("train"),
        batch_size=batch_size,
        seed=seed,
        split="val",
    )
    return ScoreBlock(
        scores=[float(t.score) for t in result.traces],
        prompt_tokens=[int(t.prompt_tokens) for t in result.traces],
        completions=int(result.completions),
        traces=[asdict(t) for t in result.traces],
    )


class Scorer:
    """Per-harness score cache over nested prefixes of one validation ordering; extends only what is missing and
    scores several harnesses at once through ``roll_many`` (sequential here, fanned out by the orchestrator)."""

    def __init__(self, roll_many: RollMany, n_problems: int, budget: Budget | None):
        self.roll_many = roll_many
        self.n_problems = n_problems
        self.budget = budget
        self.scores: dict[str, list[float]] = {}
        self.tokens: dict[str, list[int]] = {}
        self.traces: dict[str, list[dict[str, Any]]] = {}
        self.completions = 0

    def ensure(self, harnesses: Sequence[Harness], n: int) -> None:
        jobs = [(h, len(self.scores.get(h.sha, [])), n) for h in harnesses if len(self.scores.get(h.sha, [])) < n]
        if not jobs:
            return
        need = sum((end - start) * h.spec.inference.samples for h, start, end in jobs)
        if self.budget is not None and self.budget.remaining("harness") < need:
            raise BudgetStop(
                f"harness budget exhausted: {self.budget.remaining('harness')} completions left, {need} needed"
            )
        for (h, _start, _end), block in zip(jobs, self.roll_many(jobs), strict=True):
            self.scores.setdefault(h.sha, []).extend(block.scores)
            self.tokens.setdefault(h.sha, []).extend(block.prompt_tokens)
            self.traces.setdefault(h.sha, []).extend(block.traces)
            self.completions += block.completions
            if self.budget is not None:
                self.budget.charge_up_to("harness", block.completions)

    def score(self, harness: Harness, n: int) -> list[float]:
        self.ensure([harness], n)
        return self.scores[harness.sha][:n]

    def prompt_tokens(self, sha: str) -> float | None:
        toks = self.tokens.get(sha)
        return sum(toks) / len(toks) if toks else None


def validation_order(suite: Suite, seed: int) -> list[Problem]:
    """A fixed, seeded ordering of the validation split (prefixes of it are the halving subsets)."""
    problems = list(suite.problems("val"))
    random.Random(f"val-order-{seed}").shuffle(problems)
    return problems


def problems_of(suite: Suite, split: str, n: int, seed: int) -> list[Problem]:
    """The first ``n`` problems of a split: val in the run's seeded order (`validation_order`: nested subsets),
    train and test as listed."""
    if split == "val":
        return validation_order(suite, seed)[:n]
    if split not in ("train", "test"):
        raise ValueError(f"split must be train, val or test (got {split!r})")
    return list(suite.problems(split))[:n]  # type: ignore[arg-type]


class BudgetStop(Exception):
    """The harness share of the budget cannot pay for the next rollouts."""
