"""GRPO reward functions of the weights leg: the suite's score of the harness-parsed answer, and a generic shaping.

A reward function here follows TRL's contract (``GRPOTrainer`` calls ``f(prompts=..., completions=...,
completion_ids=..., **dataset_columns) -> list[float]``, one float per completion). Both functions are built from a
frozen harness and the suite, look the problem up by the ``problem_id`` dataset column, and never raise on a bad
completion: anything that fails to parse (or makes the scorer raise) scores 0.

- `TaskScoreReward` — ``suite.score(harness.parse_answer(completion_cut_at_stop), problem)``: the reward the weights
  leg optimises and reports. It also counts every completion it scores (``count``), which is the exact number of
  completions TRL generated (every generated completion is scored exactly once).
- `SimilarityReward` — shaping: character-level similarity (`difflib.SequenceMatcher` ratio, in [0, 1]) of the parsed
  answer to the gold answer, both as strings after the harness has undone its encoding. Generic on purpose (nothing
  suite-specific): it gives a graded signal where exact match is all-or-nothing, e.g. ``579`` vs gold ``578`` → 0.67.
  Unparsable → 0.

Population (the co-overfitting mitigation): built with ``population=[h0, h1, ...]`` instead of one harness, a reward
parses each completion with the member named by the dataset's ``harness_idx`` column (the member that rendered that
prompt), cut at that member's stop strings (the stop rule of `whale_core.stops`).

Simplified: the harness's ``inference.samples``/``aggregate`` (self-consistency) is an evaluation-time policy and plays
no part here: each sampled completion is rewarded on its own, which is what GRPO's group advantage needs.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from whale_core.stops import cut_at_stop
from whale_core.suites.base import Problem


class _HarnessLike(Protocol):
    def parse_answer(self, completion: str, problem: Problem | None = None) -> str: ...


class _SuiteLike(Protocol):
    def score(self, answer: str | None, problem: Problem) -> float: ...


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string (text prompts) or a message list (conversational prompts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else str(content)
    return str(completion)


def parse_or_none(
    harness: _HarnessLike, completion: Any, stops: Sequence[str], problem: Problem | None = None
) -> str | None:
    """The harness-parsed answer of a completion (cut at the first stop string), or ``None`` if anything fails.

    TRL decoded the completion's tokens up to its first end token (the ids `whale_core.stops.end_token_ids` gave it),
    so with this cut the text is the one evaluation's `whale_core.stops.finish` makes of the same tokens."""
    try:
        return harness.parse_answer(cut_at_stop(completion_text(completion), stops), problem)
    except Exception:  # parse errors, but also any bug in a user's parse pipeline: a reward never raises
        return None


class _ProblemReward(ABC):
    """Shared plumbing: problem lookup by id, parse, never raise."""

    __name__ = "reward"

    def __init__(
        self,
        harness: _HarnessLike,
        suite: _SuiteLike,
        problems: Iterable[Problem],
        stops: Sequence[str],
        *,
        population: Sequence[tuple[_HarnessLike, Sequence[str]]] = (),
    ):
        """``population``: (harness, stops) per member, index 0 first; empty means ``[(harness, stops)]``."""
        self.harness = harness
        self.suite = suite
        self.problems: dict[str, Problem] = {p.id: p for p in problems}
        self.stops = tuple(stops)
        self.members = [(h, tuple(st)) for h, st in population] or [(harness, self.stops)]

    def parse(self, completion: Any, member: int = 0, problem: Problem | None = None) -> str | None:
        """The answer of ``completion`` to ``problem`` parsed by population member ``member`` (None when
        unparsable)."""
        try:
            harness, stops = self.members[member]
        except IndexError:
            raise IndexError(f"reward: harness_idx {member} is outside the population of {len(self.members)}") from None
        return parse_or_none(harness, completion, stops, problem)

    def _problem(self, problem_id: str) -> Problem:
        try:
            return self.problems[problem_id]
        except KeyError:
            raise KeyError(f"reward: problem id {problem_id!r} is not in the leg's training problems") from None

    @abstractmethod
    def one(self, completion: Any, problem: Problem, member: int = 0) -> float:
        """The reward of one completion for one problem, parsed by population member ``member`` (never raises)."""

    def __call__(
        self, completions: Sequence[Any], problem_id: Sequence[str], harness_idx: Sequence[int] | None = None, **_: Any
    ) -> list[float]:
        members = list(harness_idx) if harness_idx is not None else [0] * len(completions)
        return [
            self.one(c, self._problem(pid), int(m)) for c, pid, m in zip(completions, problem_id, members, strict=True)
        ]


class TaskScoreReward(_ProblemReward):
    """The suite's score of the parsed answer (0 when unparsable or when the scorer raises); counts completions."""

    __name__ = "task_score"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.count = 0

    def one(self, completion: Any, problem: Problem, member: int = 0) -> float:
        answer = self.parse(completion, member, problem)
        if answer is None:
            return 0.0
        try:
            return float(self.suite.score(answer, problem))
        except Exception:
            return 0.0

    def __call__(
        self, completions: Sequence[Any], problem_id: Sequence[str], harness_idx: Sequence[int] | None = None, **kw: Any
    ) -> list[float]:
        rewards = super().__call__(completions, problem_id, harness_idx, **kw)
        self.count += len(rewards)
        return rewards


class SimilarityReward(_ProblemReward):
    """Shaping: `difflib` ratio between the parsed answer and the gold answer (strings); unparsable → 0."""

    __name__ = "answer_similarity"

    def one(self, completion: Any, problem: Problem, member: int = 0) -> float:
        answer = self.parse(completion, member, problem)
        if answer is None:
            return 0.0
        return similarity(answer, problem.answer)


def similarity(answer: str, gold: str) -> float:
    """Character-level similarity in [0, 1] (1 only for equal strings after stripping surrounding spaces)."""
    a, g = str(answer).strip(), str(gold).strip()
    if not a and not g:
        return 1.0
    return difflib.SequenceMatcher(None, a, g, autojunk=False).ratio()
