"""Candidate selection statistics: the paired acceptance test, successive halving, and the Pareto front.

Pure functions over per-problem scores; no model, no I/O.

- ``paired_test`` decides whether a candidate harness beats the incumbent by more than the noise. Both are scored on
  the SAME problems in the same order, so the test uses per-problem differences (a one-sided paired z-test on the
  mean difference). Simplified: a normal approximation with the sample standard deviation; no small-n t correction
  and no multiple-comparison correction (successive halving already spends its budget on the survivors, and the
  ``z`` threshold is the caller's knob).
- ``successive_halving`` spends a validation budget on many candidates: every round scores the survivors on the first
  ``n`` problems of one fixed validation ordering (so rounds are nested and scores stay paired) and keeps the top
  fraction (at least one). Ties are broken by mean, then by the order the candidates were given.
- ``pareto_front`` flags points that no other point dominates (maximize the first value, minimize the second), e.g.
  score vs prompt tokens per problem.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PairedResult:
    """Outcome of ``paired_test``: mean difference (candidate - incumbent), its standard error, z, n, the verdict."""

    delta: float
    se: float
    z_score: float
    n: int
    accept: bool
    reason: str


def paired_test(
    incumbent: Sequence[float],
    candidate: Sequence[float],
    *,
    z: float = 1.645,
    min_delta: float = 0.0,
) -> PairedResult:
    """One-sided paired test: accept the candidate iff ``delta > min_delta`` and ``delta > z * se``.

    ``incumbent[i]`` and ``candidate[i]`` are scores on the same problem ``i``. ``delta = mean(c - i)``,
    ``se = sd(diffs) / sqrt(n)`` (sample sd, ddof=1). When ``se == 0`` (all differences equal) the candidate is
    accepted iff ``delta > min_delta`` and ``delta > 0``. With a single problem the noise cannot be estimated:
    ``se`` is infinite and the candidate is rejected. Raises ``ValueError`` on a length mismatch or no problems.
    """
    if len(incumbent) != len(candidate):
        raise ValueError(
            f"paired_test needs scores on the same problems: incumbent has {len(incumbent)}, "
            f"candidate has {len(candidate)}"
        )
    n = len(incumbent)
    if n == 0:
        raise ValueError("paired_test needs at least one problem, got 0")
    diffs = [float(c) - float(i) for i, c in zip(incumbent, candidate, strict=True)]
    delta = math.fsum(diffs) / n
    if n == 1:
        se = math.inf
    else:
        var = math.fsum((d - delta) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(var) / math.sqrt(n)
        if se < 1e-12:  # guard float noise: identical differences give exactly zero spread
            se = 0.0
    if se == 0.0:
        z_score = math.inf if delta > 0 else (-math.inf if delta < 0 else 0.0)
        accept = delta > min_delta and delta > 0
    elif math.isinf(se):
        z_score = 0.0
        accept = False
    else:
        z_score = delta / se
        accept = delta > min_delta and delta > z * se
    nums = f"delta={delta:+.4f}, se={se:.4f}, z={z_score:.2f} (threshold z={z}, min_delta={min_delta}), n={n}"
    if accept:
        reason = f"accept: candidate beats incumbent beyond noise: {nums}"
    elif n == 1:
        reason = f"reject: one problem cannot separate signal from noise: {nums}"
    elif delta <= min_delta:
        reason = f"reject: mean gain not above min_delta: {nums}"
    else:
        reason = f"reject: gain within noise (delta <= z*se = {z * se:.4f}): {nums}"
    return PairedResult(delta=delta, se=se, z_score=z_score, n=n, accept=accept, reason=reason)


@dataclass(frozen=True)
class HalvingRound:
    """One planned round: how many candidates are scored and on how many problems (the first ``size``)."""

    index: int
    n_candidates: int
    size: int
    keep: int  # how many survive this round


def _keep_count(n: int, keep_fraction: float) -> int:
    return max(1, math.floor(n * keep_fraction + 1e-9))


def _check_keep(keep_fraction: float) -> None:
    if not 0.0 < keep_fraction < 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1), got {keep_fraction}")


def successive_halving_plan(
    n_candidates: int,
    subset_sizes: Sequence[int] | None = None,
    keep_fraction: float = 0.5,
    *,
    max_size: int | None = None,
    min_size: int = 8,
) -> list[HalvingRound]:
    """The rounds successive halving will run, and how many problems it will score at most.

    With ``subset_sizes`` given (positive, non-decreasing), there is one round per size; each keeps
    ``max(1, floor(n * keep_fraction))``. Without them, ``max_size`` (the validation set size) is required and the
    sizes are derived: as many rounds as it takes to get down to one survivor (one round for one candidate), the
    last at ``max_size``, each earlier one ``keep_fraction`` times the next (never under ``min_size``).
    """
    if n_candidates < 1:
        raise ValueError(f"successive halving needs at least one candidate, got {n_candidates}")
    _check_keep(keep_fraction)
    if subset_sizes is None:
        if max_size is None or max_size < 1:
            raise ValueError("successive_halving_plan needs subset_sizes or a positive max_size")
        counts = [n_candidates]
        while counts[-1] > 1 and _keep_count(counts[-1], keep_fraction) > 1:
            counts.append(_keep_count(counts[-1], keep_fraction))
        n_rounds = len(counts)
        sizes = [
            min(max_size, max(min(min_size, max_size), math.ceil(max_size * keep_fraction ** (n_rounds - 1 - r))))
            for r in range(n_rounds)
        ]
    else:
        sizes = [int(s) for s in subset_sizes]
        if not sizes:
            raise ValueError("subset_sizes is empty")
        if any(s < 1 for s in sizes):
            raise ValueError(f"subset sizes must be positive, got {sizes}")
        if any(b < a for a, b in itertools.pairwise(sizes)):
            raise ValueError(f"subset sizes must be non-decreasing (rounds are nested), got {sizes}")
    plan: list[HalvingRound] = []
    alive = n_candidates
    for r, size in enumerate(sizes):
        keep = _keep_count(alive, keep_fraction)
        plan.append(HalvingRound(index=r, n_candidates=alive, size=size, keep=keep))
        alive = keep
    return plan


@dataclass(frozen=True)
class RoundResult:
    """What one round scored: per-candidate scores on the first ``size`` problems, means, and who survived."""

    index: int
    size: int
    scores: dict[str, list[float]]
    means: dict[str, float]
    ranking: list[str]  # best first
    kept: list[str]  # in ranking order


@dataclass(frozen=True)
class HalvingResult:
    """Outcome of ``successive_halving``.

    ``problems_scored`` counts distinct (candidate, problem) pairs, i.e. the sum over candidates of the largest
    ``n`` each was scored on: the real cost when ``score_fn`` reuses its earlier prefix (cached rollouts).
    ``problems_requested`` is the sum of ``n`` over all ``score_fn`` calls: the cost when it recomputes.
    ``scores`` holds, per candidate, its longest score list (the winner's is on the last round's size).
    """

    rounds: list[RoundResult]
    survivors: list[str]
    winner: str
    problems_scored: int
    problems_requested: int
    scores: dict[str, list[float]] = field(default_factory=dict)


def successive_halving(
    candidates: list[str],
    score_fn: Callable[[str, int], list[float]],
    sizes: list[int],
    keep_fraction: float = 0.5,
    prefetch: Callable[[list[str], int], None] | None = None,
) -> HalvingResult:
    """Run successive halving over ``candidates`` with ``score_fn(candidate_id, n)``.

    ``prefetch(alive, n)``, when given, is called at the start of each round with the candidates still alive, so a
    caller can score them concurrently (e.g. fan out through an orchestrator) before ``score_fn`` reads the results.

    Contract for ``score_fn``: it returns ``n`` per-problem scores on the first ``n`` problems of one fixed
    validation ordering, so a later, larger round extends the earlier one and all candidates in a round are paired.
    Every round keeps ``max(1, floor(alive * keep_fraction))`` by mean score, ties broken by the order given.
    Candidate ids must be unique. Raises ``ValueError`` when ``score_fn`` returns the wrong number of scores.
    """
    if not candidates:
        raise ValueError("successive halving needs at least one candidate")
    if len(set(candidates)) != len(candidates):
        raise ValueError(f"candidate ids must be unique, got {candidates}")
    plan = successive_halving_plan(len(candidates), sizes, keep_fraction)
    order = {c: i for i, c in enumerate(candidates)}
    alive = list(candidates)
    largest: dict[str, int] = {}
    latest: dict[str, list[float]] = {}
    requested = 0
    rounds: list[RoundResult] = []
    for rnd in plan:
        scores: dict[str, list[float]] = {}
        if prefetch is not None:
            prefetch(list(alive), rnd.size)
        for cand in alive:
            got = [float(x) for x in score_fn(cand, rnd.size)]
            if len(got) != rnd.size:
                raise ValueError(f"score_fn({cand!r}, {rnd.size}) returned {len(got)} scores, expected {rnd.size}")
            scores[cand] = got
            latest[cand] = got
            requested += rnd.size
            largest[cand] = max(largest.get(cand, 0), rnd.size)
        means = {c: math.fsum(s) / len(s) for c, s in scores.items()}
        ranking = sorted(alive, key=lambda c: (-means[c], order[c]))
        kept = ranking[: rnd.keep]
        rounds.append(
            RoundResult(index=rnd.index, size=rnd.size, scores=scores, means=means, ranking=ranking, kept=kept)
        )
        alive = sorted(kept, key=lambda c: order[c])
    final_kept = rounds[-1].kept
    return HalvingResult(
        rounds=rounds,
        survivors=final_kept,
        winner=final_kept[0],
        problems_scored=sum(largest.values()),
        problems_requested=requested,
        scores=latest,
    )


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each ``(maximize, minimize)`` point, whether no other point dominates it.

    ``q`` dominates ``p`` when ``q[0] >= p[0]`` and ``q[1] <= p[1]`` with at least one strict. Duplicate points are
    all on the front (neither dominates the other). O(n^2): leaderboards are small.
    """
    flags: list[bool] = []
    for i, (a, b) in enumerate(points):
        dominated = False
        for j, (c, d) in enumerate(points):
            if i != j and c >= a and d <= b and (c > a or d < b):
                dominated = True
                break
        flags.append(not dominated)
    return flags
