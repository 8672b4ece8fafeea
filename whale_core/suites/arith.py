"""The `arith` suite: multi-digit addition ``a + b`` with both operands of the same length, generated offline.

Problems are drawn per digit length ("band"): band counts follow relative weights (default favouring the 2–3-digit
band, where a tiny model trained for a few CPU minutes is learnable; see STACK.md) and are capped by how many distinct
problems a band holds (1-digit: 55), the overflow going to the other bands. Each band's problems are drawn without
replacement from its unordered pairs ({a, b} counts once, operand order is then random), then dealt to test, val and
train, so splits are disjoint by construction. Everything is derived from string-seeded ``random.Random`` instances,
hence identical across processes and Python versions with the same seed, sizes and options.

Also home of the two small helpers other generated suites use: `allocate_counts` and `allocate_splits`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Hashable, Mapping, Sequence
from importlib import resources
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from whale_core.suites.base import SPLITS, Problem, Split
from whale_core.suites.registry import DEFAULT_SIZES, SuiteError, parse_options

K = TypeVar("K", bound=Hashable)

# Relative weight per digit length; lengths not listed weigh 1.
DEFAULT_DIGIT_WEIGHTS: dict[int, float] = {1: 1.0, 2: 3.0, 3: 3.0, 4: 2.0, 5: 1.0}
_INT = re.compile(r"[+-]?[0-9]+")


def load_seed(name: str) -> str:
    """The seed harness text ``seeds/<name>.yaml`` shipped with the package."""
    return (resources.files("whale_core.suites.seeds") / f"{name}.yaml").read_text(encoding="utf-8")


def allocate_counts(total: int, weights: Mapping[K, float], caps: Mapping[K, int]) -> dict[K, int]:
    """Split ``total`` over keys proportionally to ``weights``, never exceeding ``caps``; overflow is re-spread.

    Deterministic (largest remainder, ties by key order). Raises `SuiteError` when the caps cannot hold ``total``.
    """
    counts = {k: 0 for k in weights}
    remaining = total
    active = [k for k in weights if weights[k] > 0 and caps[k] > 0]
    while remaining > 0 and active:
        wsum = sum(weights[k] for k in active)
        shares = {k: remaining * weights[k] / wsum for k in active}
        give = {k: math.floor(shares[k]) for k in active}
        leftover = remaining - sum(give.values())
        for k in sorted(active, key=lambda k: shares[k] - give[k], reverse=True)[:leftover]:
            give[k] += 1
        for k in active:
            g = min(give[k], caps[k] - counts[k])
            counts[k] += g
            remaining -= g
        active = [k for k in active if counts[k] < caps[k]]
    if remaining > 0:
        raise SuiteError(f"cannot draw {total} distinct problems: only {sum(caps.values())} exist with these options")
    return counts


def allocate_splits(
    sizes: Mapping[str, int], weights: Mapping[K, float], capacity: Mapping[K, int]
) -> dict[Split, dict[K, int]]:
    """Per split, how many problems come from each band. Splits get a fair share of small bands when possible.

    Test is allocated first, then val, then train, each from what earlier splits left.
    """
    total = sum(sizes[s] for s in SPLITS)
    available = sum(n for k, n in capacity.items() if weights[k] > 0)
    if total > available:
        raise SuiteError(f"sizes ask for {total} problems but only {available} distinct ones exist")
    left = dict(capacity)
    out: dict[Split, dict[K, int]] = {}
    for split in ("test", "val", "train"):
        fair = {k: min(left[k], math.ceil(capacity[k] * sizes[split] / total)) for k in capacity}
        try:
            counts = allocate_counts(sizes[split], weights, fair)
        except SuiteError:
            counts = allocate_counts(sizes[split], weights, left)
        for k, n in counts.items():
            left[k] -= n
        out[split] = counts
    return out


def check_sizes(sizes: Mapping[str, int] | None, suite: str) -> dict[str, int]:
    """Sizes filled with defaults and checked (keys train/val/test, positive ints)."""
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    if set(sizes) != set(SPLITS):
        raise SuiteError(f"suite {suite!r}: sizes must have exactly the keys train, val, test (got {sorted(sizes)})")
    for split, n in sizes.items():
        if not isinstance(n, int) or n < 1:
            raise SuiteError(f"suite {suite!r}: sizes.{split} must be a positive integer (got {n!r})")
    return sizes


def canonical_int(text: str) -> str | None:
    """``text`` as a canonical integer string (sign, no leading zeros), or ``None`` when it is not an integer.

    String based, so huge inputs cannot trip Python's int-conversion digit limit.
    """
    text = text.strip()
    if not _INT.fullmatch(text):
        return None
    digits = text.lstrip("+-").lstrip("0") or "0"
    return digits if digits == "0" or not text.startswith("-") else "-" + digits


def score_integer(answer: str | None, gold: str) -> float:
    """1.0 when ``answer`` is an integer equal to ``gold`` (leading zeros, sign and surrounding spaces allowed)."""
    if answer is None:
        return 0.0
    got = canonical_int(str(answer))
    return 1.0 if got is not None and got == canonical_int(gold) else 0.0


class ArithOptions(BaseModel):
    """Options of the `arith` suite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_digits: int = Field(default=1, ge=1, le=18)
    max_digits: int = Field(default=5, ge=1, le=18)
    digit_weights: dict[int, float] | None = None  # relative weight per digit length; default DEFAULT_DIGIT_WEIGHTS

    @model_validator(mode="after")
    def _check(self) -> ArithOptions:
        if self.max_digits < self.min_digits:
            raise ValueError(f"max_digits ({self.max_digits}) must be >= min_digits ({self.min_digits})")
        for n, w in (self.digit_weights or {}).items():
            if not self.min_digits <= n <= self.max_digits or w < 0:
                raise ValueError(f"digit_weights: key {n} must be within min_digits..max_digits and weight >= 0")
        if self.digit_weights is not None and not any(w > 0 for w in self.digit_weights.values()):
            raise ValueError("digit_weights: at least one weight must be > 0")
        return self

    def weights(self) -> dict[int, float]:
        table = DEFAULT_DIGIT_WEIGHTS if self.digit_weights is None else self.digit_weights
        default = 1.0 if self.digit_weights is None else 0.0
        return {n: float(table.get(n, default)) for n in range(self.min_digits, self.max_digits + 1)}


def _operand_range(digits: int) -> tuple[int, int]:
    """Smallest operand and how many there are with this many digits (1 digit includes 0)."""
    if digits == 1:
        return 0, 10
    return 10 ** (digits - 1), 9 * 10 ** (digits - 1)


def _pair(index: int, lo: int) -> tuple[int, int]:
    """The ``index``-th unordered pair (c <= r) in triangular order, offset by ``lo``."""
    r = (math.isqrt(8 * index + 1) - 1) // 2
    c = index - r * (r + 1) // 2
    return lo + c, lo + r


class GeneratedSuite:
    """Shared by generated suites: splits are built once, on first use, by the subclass's ``_generate``."""

    _splits: dict[Split, tuple[Problem, ...]] | None = None

    def _generate(self) -> dict[Split, tuple[Problem, ...]]:
        raise TypeError(f"{type(self).__name__} must define _generate()")

    def problems(self, split: Split) -> Sequence[Problem]:
        if split not in SPLITS:
            raise SuiteError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        if self._splits is None:
            self._splits = self._generate()
        return self._splits[split]


class ArithSuite(GeneratedSuite):
    """Addition of two same-length non-negative integers. See the module docstring for how problems are drawn."""

    def __init__(self, seed: int = 0, sizes: Mapping[str, int] | None = None, **options: Any) -> None:
        self.name = "arith"
        self.seed = seed
        self.sizes = check_sizes(sizes, self.name)
        self.options = parse_options(ArithOptions, options, self.name)
        lo, hi = self.options.min_digits, self.options.max_digits
        band = f"exactly {lo}" if lo == hi else f"from {lo} to {hi}"
        self.description = (
            "Each problem asks for the sum a + b of two non-negative integers given as decimal strings in the "
            f"fields `a` and `b`; both operands of a problem have the same number of digits, {band}. The answer is "
            "the sum as an integer; it is correct only when its integer value equals the exact sum (leading zeros "
            "and surrounding spaces are ignored); an answer that does not parse as an integer scores 0. There is no "
            "partial credit."
        )
        self.seed_harness = load_seed("arith")
        self._splits: dict[Split, tuple[Problem, ...]] | None = None

    def score(self, answer: str | None, problem: Problem) -> float:
        return score_integer(answer, problem.answer)

    def _generate(self) -> dict[Split, tuple[Problem, ...]]:
        weights = self.options.weights()
        capacity = {n: _operand_range(n)[1] * (_operand_range(n)[1] + 1) // 2 for n in weights}
        try:
            plan = allocate_splits(self.sizes, weights, capacity)
        except SuiteError as exc:
            raise SuiteError(f"suite 'arith' (sizes {self.sizes}): {exc}") from None
        out: dict[Split, list[Problem]] = {s: [] for s in SPLITS}
        for digits in weights:
            need: list[tuple[Split, int]] = [(s, plan[s][digits]) for s in ("test", "val", "train")]
            total = sum(n for _, n in need)
            if total == 0:
                continue
            rng = random.Random(f"arith:{self.seed}:{digits}")
            lo, _ = _operand_range(digits)
            picks = rng.sample(range(capacity[digits]), total)
            start = 0
            for split, n in need:
                for index in picks[start : start + n]:
                    a, b = _pair(index, lo)
                    if rng.random() < 0.5:
                        a, b = b, a
                    out[split].append(
                        Problem(
                            id=f"arith:{a}+{b}",
                            fields={"a": str(a), "b": str(b)},
                            answer=str(a + b),
                            meta={"digits": digits},
                        )
                    )
                start += n
        for split in SPLITS:
            random.Random(f"arith:{self.seed}:order:{split}").shuffle(out[split])
        return {s: tuple(out[s]) for s in SPLITS}
