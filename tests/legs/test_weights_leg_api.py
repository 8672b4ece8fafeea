"""`WeightsLeg`: the weights leg behind the `Leg` interface (budget cap and charge, the recorder, the reward metrics),
with a stand-in training call and, once, training the micro Llama for real (`train_pair`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.legs.test_weights_leg import LOOSE, SMALL, build_micro
from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.legs.leg import Leg, LegStart
from whale_core.legs.weights_leg import WeightsConfig, WeightsLeg, WeightsOutcome, reward_stats
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.seeds import weights_leg_seed
from whale_core.suites import load_suite

BASE = PolicyRef(model="base-dir", adapter=None, checkpoint_id="base-x")
HARNESS = HarnessRef.of(Harness.from_text(LOOSE))
STEPS = [
    {"step": 1, "reward_mean": 0.25, "reward_std": 0.1, "frac_zero_std_groups": 0.5, "kl": None},
    {"step": 2, "reward_mean": 0.75, "reward_std": 0.2, "frac_zero_std_groups": 0.0, "kl": None},
]


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def checkpoint(self, checkpoint: Any, trained_against: HarnessRef, score: float, steps: Any) -> None:
        self.calls.append((checkpoint, trained_against, score, steps))


def _start(budget: Budget, iteration: int = 1) -> LegStart:
    return LegStart("run", iteration, BASE, HARNESS, 0.4, budget)


def test_weights_leg_trains_within_the_budget_left_charges_it_and_records_the_checkpoint() -> None:
    new = PolicyRef(model="base-dir", adapter="ck", checkpoint_id="ck-1", is_base=False)
    calls: list[tuple[PolicyRef, HarnessRef, int]] = []

    def train(policy: PolicyRef, harness: HarnessRef, cap: int) -> WeightsOutcome:
        calls.append((policy, harness, cap))
        return WeightsOutcome(new, {"id": "ck-1"}, 96, 1.0, None, STEPS)

    rec = _Recorder()
    leg: Leg = WeightsLeg(BASE, None, WeightsConfig(), Path("unused"), reserve=100, recorder=rec, train=train)
    budget = Budget(1000)
    res = leg.run(_start(budget))
    assert calls == [(BASE, HARNESS, 900)]  # the budget left minus the evaluation's reserve
    assert budget.remaining("weights") == 1000 - 96
    assert rec.calls == [({"id": "ck-1"}, HARNESS, 0.4, STEPS)]
    assert (res.kind, res.policy, res.harness, res.completions, res.accepted) == ("weights", new, HARNESS, 96, None)
    assert res.metrics == reward_stats(STEPS) == {
        "steps": 2.0, "reward_first": 0.25, "reward_last": 0.75, "reward_mean": 0.5, "frac_zero_std_groups": 0.25,
    }  # fmt: skip


def test_weights_leg_with_no_budget_left_returns_the_start_pair() -> None:
    def train(*_: Any) -> WeightsOutcome:
        raise AssertionError("must not train")

    leg = WeightsLeg(BASE, None, WeightsConfig(), Path("unused"), reserve=10, train=train)
    budget = Budget(10)
    res = leg.run(_start(budget))
    assert (res.policy, res.harness, res.completions, dict(res.metrics)) == (BASE, HARNESS, 0, {})
    assert budget.remaining("weights") == 10


@pytest.mark.slow
def test_weights_leg_trains_here_by_default_with_the_seed_it_is_given(tmp_path: Path) -> None:
    """The leg trains with its config's seed as given: in a run, the engine sets it to the iteration's
    (`weights_leg_seed`), the one rule of a leg's seed."""
    micro = build_micro(tmp_path / "micro")
    base = PolicyRef(model=str(micro), adapter=None, checkpoint_id="base-micro", device="cpu")
    cfg = WeightsConfig(steps=1, save_steps=50, seed=weights_leg_seed(7, 2), **SMALL)
    leg = WeightsLeg(base, load_suite("arith"), cfg, tmp_path / "leg")
    budget = Budget(100)
    res = leg.run(LegStart("run", 2, base, HARNESS, 0.0, budget))
    assert res.completions == 16 and budget.remaining("weights") == 84 and res.metrics["steps"] == 1.0
    assert res.policy.adapter is not None and not res.policy.is_base and res.harness == HARNESS
    spec = (tmp_path / "leg" / "leg_spec.json").read_text()
    assert '"seed": 2007' in spec
    assert asdict(res)["policy"]["checkpoint_id"] == res.policy.checkpoint_id
