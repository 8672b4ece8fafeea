"""The one decider of block ascent: stop conditions (iteration cap, budget spent, no progress per leg kind), the
scheduler's choice, and the redirect of a leg the budget cannot pay for; the leg costs behind "can it run"."""

from __future__ import annotations

from whale_core.ascent.decider import (
    AscentView,
    BudgetSpent,
    Decider,
    IterationCap,
    Next,
    NoProgress,
    Stop,
    stalled_legs,
)
from whale_core.config import WhaleConfig, load_config
from whale_core.legs.budget import Budget
from whale_core.legs.costs import min_completions
from whale_core.legs.leg import LegKind
from whale_core.legs.schedule import Decision, LegOutcome, ScheduleConfig, make_scheduler, mode_legs


def _legs(*items: tuple[LegKind, float]) -> list[LegOutcome]:
    return [LegOutcome(i, kind, m) for i, (kind, m) in enumerate(items)]


def _check(cond: NoProgress, hist: list[LegOutcome], initial: float) -> str | None:
    return cond.check(AscentView(hist, Budget(1000), len(hist), initial))


def test_harness_only_stops_after_patience_legs_without_gain() -> None:
    cond = NoProgress(mode_legs("harness-only"), 2, 0.01)
    hist = _legs(("harness", 0.385), ("harness", 0.385), ("harness", 0.39))
    assert _check(cond, hist[:2], 0.07) is None  # one leg since the gain at leg 0
    why = _check(cond, hist, 0.07)
    assert why is not None and "0.3850" in why and "harness x2" in why


def test_a_gain_above_min_delta_resets_the_count() -> None:
    cond = NoProgress(mode_legs("harness-only"), 2, 0.01)
    hist = _legs(("harness", 0.30), ("harness", 0.30), ("harness", 0.35), ("harness", 0.35))
    assert _check(cond, hist, 0.30) is None
    assert _check(cond, [*hist, LegOutcome(4, "harness", 0.355)], 0.30) is not None


def test_each_leg_kind_stalls_on_its_own() -> None:
    """Harness legs that find nothing do not count against weights legs that gain (the old rule stopped H W H W
    after a flat second weights leg, with half the budget unspent)."""
    cond = NoProgress(mode_legs("whale-fixed"), 2, 0.01)
    hist = _legs(("harness", 0.1), ("weights", 0.2), ("harness", 0.2), ("weights", 0.2))
    assert stalled_legs(hist, 0.1, 0.01) == ({"harness": 2, "weights": 1}, 0.2)
    assert _check(cond, hist, 0.1) is None
    hist += [LegOutcome(4, "harness", 0.2), LegOutcome(5, "weights", 0.2)]
    why = _check(cond, hist, 0.1)
    assert why is not None and "harness x3" in why and "weights x2" in why
    # a long harness phase alone never stops an alternating run: the weights legs have not stalled
    assert _check(NoProgress(mode_legs("whale-fixed"), 3, 0.01), _legs(*[("harness", 0.385)] * 8), 0.385) is None
    assert mode_legs("weights-only") == {"weights"} and mode_legs("prompt-weights") == {"weights", "harness"}


def _decider(cfg: WhaleConfig) -> Decider:
    def runnable(kind: LegKind, budget: Budget) -> bool:
        return budget.remaining(kind) >= min_completions(cfg, kind)

    kinds = mode_legs(cfg.mode)
    stops = [IterationCap(cfg.max_legs), BudgetSpent(kinds, runnable),
             NoProgress(kinds, cfg.schedule.stop_patience, cfg.schedule.min_delta)]  # fmt: skip
    return Decider(cfg.mode, stops, make_scheduler(cfg.mode, cfg.schedule).next_leg, runnable)


def test_a_harness_leg_whose_share_cap_is_spent_becomes_a_weights_leg() -> None:
    cfg = load_config(overrides=["budget.total=10000", "budget.harness_share_cap=0.1", "iterations=10"])
    bud = Budget(10_000, 0.1)
    first = _decider(cfg).next(AscentView([], bud, 0, 0.1))
    assert first == Next("harness", "first leg: harness", False)
    bud.charge("harness", 600)  # 400 left of the cap: less than the 520 a harness leg needs
    nxt = _decider(cfg).next(AscentView(_legs(("harness", 0.1), ("weights", 0.2)), bud, 2, 0.1))
    assert isinstance(nxt, Next) and nxt.leg == "weights" and "harness budget spent (share cap, 400 left)" in nxt.reason
    # harness-only cannot train: the budget stop ends the run instead
    only = load_config(overrides=["budget.total=10000", "budget.harness_share_cap=0.1", "mode=harness-only"])
    assert _decider(only).next(AscentView(_legs(("harness", 0.1)), bud, 1, 0.1)) == Stop("rollout budget spent")


def test_stops_come_before_the_scheduler_and_name_their_reason() -> None:
    cfg = load_config(overrides=["iterations=2", "budget.total=1000"])
    assert _decider(cfg).next(AscentView(_legs(("harness", 0.1), ("weights", 0.2)), Budget(1000), 2, 0.1)) == Stop(
        "iteration cap reached (2 legs)"
    )
    spent = Budget(1000)
    spent.charge("weights", 900)  # 100 left: less than one GRPO step plus the val evaluation after it
    assert _decider(cfg).next(AscentView([], spent, 0, 0.1)) == Stop("rollout budget spent")


def test_leg_costs_for_can_it_run() -> None:
    cfg = load_config(overrides=["rollout.val_problems=40", "weights.per_device_train_batch_size=16"])
    # harness: the incumbent on 40 val problems + 8 candidates on the first round (40, capped by the val problems);
    # weights: one GRPO step + the val evaluation the leg keeps back for after it
    assert (min_completions(cfg, "harness"), min_completions(cfg, "weights")) == (40 + 8 * 40, 16 + 40)
    # the 1 % bet's seed 1 at 150k: 460 left after a weights leg ran a harness leg that could score no candidate
    assert min_completions(WhaleConfig(), "harness") == 200 + 8 * 40 > 460


def test_the_scheduler_is_asked_only_when_no_stop_holds() -> None:
    asked: list[int] = []

    def schedule(history: object) -> Decision:
        asked.append(1)
        return Decision("weights", "x", False)

    d = Decider("whale-fixed", [IterationCap(1)], schedule, lambda k, b: True)
    assert d.next(AscentView([], Budget(10), 1, 0.0)) == Stop("iteration cap reached (1 legs)") and not asked
    assert d.next(AscentView([], Budget(10), 0, 0.0)) == Next("weights", "x", False) and asked == [1]
    assert ScheduleConfig().continue_from == "last"
