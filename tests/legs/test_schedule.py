"""The schedulers on synthetic metric curves: plateau switches, noise does not, patience is respected."""

from __future__ import annotations

import random

import pytest

from whale_core.legs.schedule import (
    AdaptiveScheduler,
    FixedScheduler,
    LegOutcome,
    ScheduleConfig,
    make_scheduler,
    plateaued,
)


def _history(leg: str, values: list[float], accepted: bool | None = None, start: float = 0.0) -> list[LegOutcome]:
    return [
        LegOutcome(iteration=i, leg=leg, metric=v, accepted=accepted, metric_before=start if i == 0 else None)  # type: ignore[arg-type]
        for i, v in enumerate(values)
    ]


def test_plateau_detected_on_flat_curve() -> None:
    flat, why = plateaued([0.30, 0.40, 0.41, 0.405, 0.41, 0.40, 0.41], patience=2, min_delta=0.02, alpha=0.5)
    assert flat, why


def test_no_plateau_before_patience() -> None:
    flat, _ = plateaued([0.3, 0.3], patience=2, min_delta=0.01, alpha=1.0)
    assert not flat
    flat, _ = plateaued([0.3, 0.3, 0.3], patience=2, min_delta=0.01, alpha=1.0)
    assert flat


def test_rising_noisy_curve_is_not_a_plateau() -> None:
    rng = random.Random(0)
    switched = 0
    for _ in range(50):
        values = [0.2 + 0.05 * i + rng.uniform(-0.02, 0.02) for i in range(6)]
        flat, _ = plateaued(values, patience=2, min_delta=0.01, alpha=0.5)
        switched += flat
    assert switched == 0


def test_noise_around_flat_does_plateau() -> None:
    rng = random.Random(1)
    values = [0.5 + rng.uniform(-0.01, 0.01) for _ in range(6)]
    flat, _ = plateaued(values, patience=3, min_delta=0.02, alpha=0.5)
    assert flat


def test_adaptive_switches_weights_to_harness_on_plateau() -> None:
    sched = AdaptiveScheduler(ScheduleConfig(start="weights", patience=2, min_delta=0.01, smoothing=1.0))
    assert sched.next_leg([]).leg == "weights"
    rising = _history("weights", [0.3, 0.4], start=0.2)
    d = sched.next_leg(rising)
    assert d.leg == "weights" and not d.switched
    flat = _history("weights", [0.3, 0.4, 0.40, 0.40], start=0.2)
    d = sched.next_leg(flat)
    assert d.leg == "harness" and d.switched and "plateau" in d.reason


def test_adaptive_leaves_harness_when_nothing_accepted() -> None:
    sched = AdaptiveScheduler(ScheduleConfig(harness_patience=1))
    hist = [LegOutcome(0, "weights", 0.3), LegOutcome(1, "harness", 0.3, accepted=False, metric_before=0.3)]
    d = sched.next_leg(hist)
    assert d.leg == "weights" and "no candidate accepted" in d.reason
    hist_ok = [LegOutcome(0, "weights", 0.3), LegOutcome(1, "harness", 0.4, accepted=True, metric_before=0.3)]
    assert sched.next_leg(hist_ok).leg == "harness"


def test_adaptive_max_phase() -> None:
    sched = AdaptiveScheduler(ScheduleConfig(start="weights", max_phase=3, patience=10))
    hist = _history("weights", [0.1, 0.2, 0.3], start=0.0)
    assert sched.next_leg(hist).leg == "harness"


def test_fixed_alternation_with_phase_lengths() -> None:
    sched = FixedScheduler(ScheduleConfig(start="harness", phase={"weights": 2, "harness": 1}))  # type: ignore[arg-type]
    hist: list[LegOutcome] = []
    legs = []
    for i in range(7):
        leg = sched.next_leg(hist).leg
        legs.append(leg)
        hist.append(LegOutcome(i, leg, 0.5))
    assert legs == ["harness", "weights", "weights", "harness", "weights", "weights", "harness"]


@pytest.mark.parametrize(("mode", "leg"), [("weights-only", "weights"), ("harness-only", "harness")])
def test_single_leg_modes(mode: str, leg: str) -> None:
    sched = make_scheduler(mode, ScheduleConfig())
    hist = [LegOutcome(0, leg, 0.5), LegOutcome(1, leg, 0.5)]  # type: ignore[arg-type]
    assert sched.next_leg(hist).leg == leg


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="valid: whale-adaptive"):
        make_scheduler("whale", ScheduleConfig())
