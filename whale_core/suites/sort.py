"""The `sort` suite: a short list of small integers (``"5 2 9 1"``), answered sorted ascending (``"1 2 5 9"``).

A different shape from `arith` (variable-length output, every position matters) that a tiny char-level model can
partly learn. Lists are drawn per length (default 3–7 items, values 0–9, repeats allowed, equal weight per length,
capped by how many distinct lists a length holds); each length's lists are drawn without replacement and dealt to
test, val and train, so splits are disjoint by the list as given. Deterministic per (seed, sizes, options).

Scoring: the answer is split into items on spaces and commas (so whitespace differences do not matter) and items are
compared as integers. Default: exact match (1 or 0). Option ``partial_credit: true`` gives the fraction of
positions right, over the longer of the two lists (a denser reward for RL; a wrong length still loses the extra
positions). Simplified: no descending order, no other separators.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from whale_core.suites.arith import GeneratedSuite, allocate_splits, canonical_int, check_sizes, load_seed
from whale_core.suites.base import SPLITS, Problem, Split
from whale_core.suites.registry import SuiteError, parse_options


def _items(text: str) -> list[str]:
    return [t for t in re.split(r"[\s,]+", text.strip()) if t]


def _norm(token: str) -> str:
    return canonical_int(token) or token


class SortOptions(BaseModel):
    """Options of the `sort` suite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_len: int = Field(default=3, ge=1, le=20)
    max_len: int = Field(default=7, ge=1, le=20)
    max_value: int = Field(default=9, ge=1, le=999)  # items are drawn from 0..max_value
    partial_credit: bool = False

    @model_validator(mode="after")
    def _check(self) -> SortOptions:
        if self.max_len < self.min_len:
            raise ValueError(f"max_len ({self.max_len}) must be >= min_len ({self.min_len})")
        return self


class SortSuite(GeneratedSuite):
    """Sort a list of small integers ascending. See the module docstring."""

    def __init__(self, seed: int = 0, sizes: Mapping[str, int] | None = None, **options: Any) -> None:
        self.name = "sort"
        self.seed = seed
        self.sizes = check_sizes(sizes, self.name)
        self.options = parse_options(SortOptions, options, self.name)
        o = self.options
        credit = (
            "the score is the fraction of positions holding the right item (over the longer of the two lists)"
            if o.partial_credit
            else "it scores 1 only when every item is right and in place, else 0"
        )
        self.description = (
            f"Each problem gives, in the field `items`, a list of {o.min_len} to {o.max_len} integers between 0 and "
            f"{o.max_value} (repeats allowed) separated by single spaces. The answer is the same items sorted in "
            "ascending order, repeats kept. Items in the answer may be separated by spaces or commas and are "
            f"compared as integers, position by position; {credit}."
        )
        self.seed_harness = load_seed("sort")
        self._splits: dict[Split, tuple[Problem, ...]] | None = None

    def score(self, answer: str | None, problem: Problem) -> float:
        if answer is None:
            return 0.0
        got = [_norm(t) for t in _items(str(answer))]
        gold = [_norm(t) for t in _items(problem.answer)]
        if got == gold:
            return 1.0
        if not self.options.partial_credit or not got:
            return 0.0
        return sum(g == w for g, w in zip(got, gold, strict=False)) / max(len(got), len(gold))

    def _generate(self) -> dict[Split, tuple[Problem, ...]]:
        o = self.options
        base = o.max_value + 1
        lengths = range(o.min_len, o.max_len + 1)
        weights = {n: 1.0 for n in lengths}
        capacity = {n: base**n for n in lengths}
        try:
            plan = allocate_splits(self.sizes, weights, capacity)
        except SuiteError as exc:
            raise SuiteError(f"suite 'sort' (sizes {self.sizes}): {exc}") from None
        out: dict[Split, list[Problem]] = {s: [] for s in SPLITS}
        for length in lengths:
            need: list[tuple[Split, int]] = [(s, plan[s][length]) for s in ("test", "val", "train")]
            total = sum(n for _, n in need)
            if total == 0:
                continue
            rng = random.Random(f"sort:{self.seed}:{length}")
            picks = rng.sample(range(capacity[length]), total)
            start = 0
            for split, n in need:
                for index in picks[start : start + n]:
                    values = [(index // base**i) % base for i in range(length)]
                    text = " ".join(map(str, values))
                    out[split].append(
                        Problem(
                            id="sort:" + "-".join(map(str, values)),
                            fields={"items": text},
                            answer=" ".join(map(str, sorted(values))),
                            meta={"length": length},
                        )
                    )
                start += n
        for split in SPLITS:
            random.Random(f"sort:{self.seed}:order:{split}").shuffle(out[split])
        return {s: tuple(out[s]) for s in SPLITS}
