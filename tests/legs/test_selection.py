"""Selection statistics: the paired acceptance test, successive halving, the Pareto front."""

from __future__ import annotations

import math
import random

import pytest

from whale_core.legs.selection import (
    paired_test,
    pareto_front,
    successive_halving,
    successive_halving_plan,
)


def _incumbent(n: int, p: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


def test_paired_test_rejects_noise() -> None:
    """Candidate = incumbent with random flips both ways: a small mean gain, a large se -> rejected."""
    rng = random.Random(0)
    inc = _incumbent(200, 0.5, seed=1)
    zeros = [i for i, x in enumerate(inc) if x == 0.0]
    ones = [i for i, x in enumerate(inc) if x == 1.0]
    up, down = rng.sample(zeros, 33), rng.sample(ones, 27)  # 60 flips, net +6: delta = +0.03
    cand = list(inc)
    for i in up:
        cand[i] = 1.0
    for i in down:
        cand[i] = 0.0
    res = paired_test(inc, cand)
    assert res.delta == pytest.approx(0.03)
    assert res.delta > 0
    assert res.se > res.delta / 1.645
    assert not res.accept
    assert "within noise" in res.reason and f"n={res.n}" in res.reason
    assert res.n == 200 and res.z_score == pytest.approx(res.delta / res.se)


def test_paired_test_accepts_real_gain() -> None:
    """Candidate fixes 40 of the incumbent's failures and breaks 2 of its successes: accepted."""
    inc = _incumbent(200, 0.4, seed=2)
    cand = list(inc)
    zeros = [i for i, x in enumerate(inc) if x == 0.0]
    ones = [i for i, x in enumerate(inc) if x == 1.0]
    for i in zeros[:40]:
        cand[i] = 1.0
    for i in ones[:2]:
        cand[i] = 0.0
    res = paired_test(inc, cand)
    assert res.delta == pytest.approx(38 / 200)
    assert res.accept and res.z_score > 1.645
    assert res.reason.startswith("accept")
    # the same gain is rejected when a larger minimum effect is demanded
    strict = paired_test(inc, cand, min_delta=0.25)
    assert not strict.accept and "min_delta" in strict.reason


def test_paired_test_edge_cases() -> None:
    with pytest.raises(ValueError, match="incumbent has 3, candidate has 2"):
        paired_test([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least one"):
        paired_test([], [])
    same = paired_test([0.0, 1.0, 0.5], [0.0, 1.0, 0.5])
    assert same.se == 0.0 and same.delta == 0.0 and not same.accept
    shift = paired_test([0.0, 0.5, 0.2], [0.1, 0.6, 0.3])  # every problem +0.1: se == 0, accepted
    assert shift.se == 0.0 and shift.accept and math.isinf(shift.z_score)
    assert not paired_test([0.0, 0.5], [0.1, 0.6], min_delta=0.2).accept
    worse = paired_test([1.0, 1.0], [0.0, 0.0])
    assert not worse.accept and worse.delta == -1.0
    one = paired_test([0.0], [1.0])  # a single problem cannot separate signal from noise
    assert not one.accept and math.isinf(one.se)


def test_halving_plan() -> None:
    plan = successive_halving_plan(8, max_size=64)
    assert [(r.n_candidates, r.size, r.keep) for r in plan] == [(8, 16, 4), (4, 32, 2), (2, 64, 1)]
    assert [r.size for r in successive_halving_plan(1, max_size=64)] == [64]
    assert [r.size for r in successive_halving_plan(16, max_size=40, min_size=8)] == [8, 10, 20, 40]
    given = successive_halving_plan(5, [10, 20, 40, 80])
    assert [(r.n_candidates, r.keep) for r in given] == [(5, 2), (2, 1), (1, 1), (1, 1)]
    with pytest.raises(ValueError, match="non-decreasing"):
        successive_halving_plan(4, [20, 10])
    with pytest.raises(ValueError, match="keep_fraction"):
        successive_halving_plan(4, [10], keep_fraction=1.0)
    with pytest.raises(ValueError, match="max_size"):
        successive_halving_plan(4)
    with pytest.raises(ValueError, match="at least one candidate"):
        successive_halving_plan(0, [10])


def test_successive_halving_keeps_top_fraction_nested() -> None:
    """Candidates with distinct true accuracies; score_fn returns a fixed per-problem prefix for each."""
    true_p = {"c0": 0.2, "c1": 0.9, "c2": 0.5, "c3": 0.7, "c4": 0.1, "c5": 0.6, "c6": 0.3, "c7": 0.4}
    full = {c: [1.0 if (i * 7919 + k * 104729) % 1000 < p * 1000 else 0.0 for i in range(64)]
            for k, (c, p) in enumerate(true_p.items())}  # fmt: skip
    calls: list[tuple[str, int]] = []

    def score_fn(cand: str, n: int) -> list[float]:
        calls.append((cand, n))
        return full[cand][:n]

    res = successive_halving(list(true_p), score_fn, sizes=[16, 32, 64])
    assert [len(r.scores) for r in res.rounds] == [8, 4, 2]
    assert [r.size for r in res.rounds] == [16, 32, 64]
    for prev, nxt in zip(res.rounds, res.rounds[1:], strict=False):
        assert set(nxt.scores) == set(prev.kept)  # only survivors go on
        for c in nxt.scores:  # nested: the larger subset extends the smaller one
            assert nxt.scores[c][: prev.size] == prev.scores[c]
    for r in res.rounds:  # kept = the top means
        cut = min(r.means[c] for c in r.kept)
        assert all(r.means[c] <= cut for c in r.scores if c not in r.kept)
    means64 = {c: sum(s) / 64 for c, s in full.items()}
    assert res.winner == max(means64, key=lambda c: means64[c]) == "c1"
    assert res.survivors == ["c1"]
    assert res.problems_requested == sum(n for _, n in calls) == 8 * 16 + 4 * 32 + 2 * 64
    assert res.problems_scored == 4 * 16 + 2 * 32 + 2 * 64  # largest n per candidate
    assert res.scores["c1"] == full["c1"]


def test_successive_halving_ties_and_errors() -> None:
    res = successive_halving(["b", "a", "c"], lambda c, n: [0.5] * n, sizes=[4, 8])
    assert res.rounds[0].ranking == ["b", "a", "c"]  # all tied: order given
    assert res.winner == "b" and res.problems_scored == 8 + 4 + 4
    single = successive_halving(["only"], lambda c, n: [1.0] * n, sizes=[10])
    assert single.winner == "only" and single.problems_scored == 10
    with pytest.raises(ValueError, match="returned 3 scores, expected 4"):
        successive_halving(["x", "y"], lambda c, n: [1.0] * 3, sizes=[4])
    with pytest.raises(ValueError, match="unique"):
        successive_halving(["x", "x"], lambda c, n: [1.0] * n, sizes=[4])


def test_pareto_front() -> None:
    pts = [(0.5, 20.0), (0.5, 30.0), (0.3, 10.0), (0.2, 40.0), (0.6, 50.0), (0.3, 10.0)]
    assert pareto_front(pts) == [True, False, True, False, True, True]
    assert pareto_front([]) == []
    assert pareto_front([(0.1, 1.0)]) == [True]
