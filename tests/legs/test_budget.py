"""Budget: never exceeded, harness share cap, eval apart, persistence round trip, config validation."""

from __future__ import annotations

import json
import random
import threading

import pytest
from pydantic import ValidationError

from whale_core.legs.budget import UNLIMITED, Budget, BudgetConfig, BudgetExceeded


@pytest.mark.parametrize("cap", [None, 0.3, 1.0])
def test_random_charges_never_exceed(cap: float | None) -> None:
    rng = random.Random(7)
    b = Budget(1000, harness_share_cap=cap)
    harness_cap = 1000 if cap is None else int(1000 * cap)
    for _ in range(500):
        kind = rng.choice(["weights", "harness", "eval"])
        n = rng.randint(0, 80)
        before = b.by_kind
        fits = n <= b.remaining(kind)
        if rng.random() < 0.5:
            assert b.try_charge(kind, n) is fits
        elif fits:
            b.charge(kind, n)
        else:
            with pytest.raises(BudgetExceeded, match=f"charging {n} {kind}"):
                b.charge(kind, n)
        if not fits:
            assert b.by_kind == before  # a refused charge charges nothing
        assert b.spent == b.by_kind["weights"] + b.by_kind["harness"] <= 1000
        assert b.by_kind["harness"] <= harness_cap
        assert b.remaining("harness") <= b.remaining("weights")
    assert b.spent > 900  # the loop got close to the limits, so the checks above were exercised
    assert b.by_kind["eval"] > 0 and b.remaining("eval") == UNLIMITED


def test_share_cap_and_exhaustion() -> None:
    b = Budget(100, harness_share_cap=0.25)
    assert b.harness_cap == 25
    b.charge("harness", 20)
    assert b.remaining("harness") == 5 and b.remaining("weights") == 80
    assert not b.try_charge("harness", 6)
    b.charge("harness", 5)
    assert b.remaining("harness") == 0
    b.charge("weights", 70)
    assert b.remaining("weights") == 5 and not b.exhausted
    b.charge("weights", 5)
    assert b.exhausted and b.spent == 100
    b.charge("eval", 10_000)  # final test evaluation: counted apart, never refused
    assert b.by_kind == {"weights": 75, "harness": 25, "eval": 10_000} and b.spent == 100
    with pytest.raises(BudgetExceeded):
        b.charge("weights", 1)
    b.charge("weights", 0)  # a zero charge always fits


def test_total_caps_harness_before_share() -> None:
    b = Budget(100, harness_share_cap=0.5)
    b.charge("weights", 90)
    assert b.remaining("harness") == 10  # total binds before the share cap


def test_bad_inputs() -> None:
    b = Budget(10)
    with pytest.raises(ValueError, match="unknown budget kind 'rollout'"):
        b.charge("rollout", 1)
    with pytest.raises(ValueError, match="non-negative int"):
        b.charge("weights", -1)
    with pytest.raises(ValidationError):
        Budget(0)
    for cap in (0.0, 1.5, -0.1):
        with pytest.raises(ValidationError, match="harness_share_cap"):
            BudgetConfig(total=10, harness_share_cap=cap)
    with pytest.raises(ValidationError):
        BudgetConfig(total=10, extra_field=1)  # type: ignore[call-arg]
    cfg = BudgetConfig()
    assert cfg.total > 0 and cfg.harness_share_cap is None
    assert Budget.from_config(BudgetConfig(total=50, harness_share_cap=1.0)).harness_cap == 50


def test_persistence_round_trip() -> None:
    b = Budget(500, harness_share_cap=0.4)
    b.charge("weights", 123)
    b.charge("harness", 77)
    b.charge("eval", 1000)
    data = json.loads(json.dumps(b.to_dict()))  # survives JSON (as stored in the archive)
    r = Budget.from_dict(data)
    assert (r.total, r.harness_share_cap, r.by_kind) == (500, 0.4, b.by_kind)
    assert r.remaining("harness") == b.remaining("harness") == 123
    with pytest.raises(ValueError, match="more than its total"):
        Budget.from_dict({"total": 10, "by_kind": {"weights": 11}})
    with pytest.raises(ValueError, match="exceeds its cap"):
        Budget.from_dict({"total": 10, "harness_share_cap": 0.5, "by_kind": {"harness": 6}})
    with pytest.raises(ValueError, match="unknown budget kind"):
        Budget.from_dict({"total": 10, "by_kind": {"other": 1}})


def test_thread_safe_charges() -> None:
    b = Budget(1000)
    charged: list[int] = []

    def work() -> None:
        n = 0
        while b.try_charge("weights", 3):
            n += 3
        charged.append(n)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sum(charged) == b.spent == 999
