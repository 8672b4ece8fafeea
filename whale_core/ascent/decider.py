"""Next leg or stop: the one decider of block ascent.

`Decider.next` is asked before every iteration. It checks the stop conditions in order — the first that holds ends
the run with its reason (recorded as a ``stop`` decision) — then asks the scheduler (`whale_core.legs.schedule`:
fixed phases, adaptive plateaus, or one leg kind) which leg runs, and redirects a leg the budget cannot pay for to
the other kind the mode runs. Everything it reads (the history of finished legs, the budget) is replayed the same way
on a resumed run, so a resumed run decides the same.

Stop conditions (composable: `Decider` takes any sequence of `StopCondition`):
- `IterationCap`: ``iterations`` legs have run (none with ``iterations: null``);
- `BudgetSpent`: no leg kind the mode runs can still run: less is left than its smallest useful leg
  (`whale_core.legs.costs.min_completions`);
- `NoProgress`: every leg kind the mode runs has had ``schedule.stop_patience`` legs *of its own* in a row that did
  not raise the run's best val score by more than ``min_delta`` (a harness leg that finds nothing does not count
  against the weights legs, nor the other way round).

The redirect: a leg kind that cannot run (its share cap spent, or less left than one GRPO step) becomes the other
kind when the mode runs it and it can; `BudgetSpent` has already stopped the run when neither can.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from whale_core.legs.budget import Budget
from whale_core.legs.leg import LegKind
from whale_core.legs.schedule import Decision, LegOutcome, mode_legs


@dataclass(frozen=True)
class Next:
    """Run a leg of ``leg``: why, and whether it switched from the previous leg's kind."""

    leg: LegKind
    reason: str
    switched: bool


@dataclass(frozen=True)
class Stop:
    """End the run: why."""

    reason: str


@dataclass(frozen=True)
class AscentView:
    """What a decision may read: the finished legs, the budget, the iteration about to run, the initial val score."""

    history: Sequence[LegOutcome]
    budget: Budget
    iteration: int
    initial: float


class StopCondition(Protocol):
    """Contract: ``check(view)`` is a pure function of the view; returns why the run stops, or None."""

    def check(self, view: AscentView) -> str | None: ...


@dataclass(frozen=True)
class IterationCap:
    max_legs: int | None

    def check(self, view: AscentView) -> str | None:
        if self.max_legs is not None and view.iteration >= self.max_legs:
            return f"iteration cap reached ({self.max_legs} legs)"
        return None


@dataclass(frozen=True)
class BudgetSpent:
    """No leg kind of ``kinds`` can run: ``runnable(kind, budget)`` is false for each."""

    kinds: frozenset[LegKind]
    runnable: Callable[[LegKind, Budget], bool]

    def check(self, view: AscentView) -> str | None:
        if any(self.runnable(k, view.budget) for k in self.kinds):
            return None
        return "rollout budget spent"


def stalled_legs(history: Sequence[LegOutcome], initial: float, min_delta: float) -> tuple[dict[str, int], float]:
    """Per leg kind, how many of its own legs in a row (since its last gain) did not raise the best val score seen
    before them (``initial`` counts) by more than ``min_delta``; and that best score."""
    best, stalled = initial, dict[str, int]()
    for o in history:
        if o.metric > best + min_delta:
            best, stalled[o.leg] = o.metric, 0
        else:
            stalled[o.leg] = stalled.get(o.leg, 0) + 1
    return stalled, best


@dataclass(frozen=True)
class NoProgress:
    """Every kind of ``kinds`` has stalled for ``patience`` legs of its own (`stalled_legs`)."""

    kinds: frozenset[LegKind]
    patience: int | None
    min_delta: float

    def check(self, view: AscentView) -> str | None:
        if not self.patience:
            return None
        stalled, best = stalled_legs(view.history, view.initial, self.min_delta)
        if not all(stalled.get(k, 0) >= self.patience for k in self.kinds):
            return None
        counts = ", ".join(f"{k} x{stalled[k]}" for k in sorted(self.kinds))
        return (
            f"no progress: best val {best:.4f} not beaten by more than {self.min_delta} in the last legs of each kind "
            f"({counts}; stop_patience {self.patience})"
        )


class Decider:
    """Stop conditions, then the scheduler, then the budget redirect (see the module docstring). ``schedule`` is the
    scheduler's call (the engine routes it through `Calls.schedule`); ``runnable(kind, budget)`` says whether a leg of
    ``kind`` can do anything with what is left."""

    def __init__(
        self,
        mode: str,
        stops: Sequence[StopCondition],
        schedule: Callable[[Sequence[LegOutcome]], Decision],
        runnable: Callable[[LegKind, Budget], bool],
    ) -> None:
        self.kinds = mode_legs(mode)
        self.stops, self.schedule, self.runnable = list(stops), schedule, runnable

    def next(self, view: AscentView) -> Next | Stop:
        for cond in self.stops:
            why = cond.check(view)
            if why:
                return Stop(why)
        d = self.schedule(view.history)
        if not self.runnable(d.leg, view.budget):
            other: LegKind = "weights" if d.leg == "harness" else "harness"
            if other in self.kinds and self.runnable(other, view.budget):
                bud = view.budget
                left = bud.remaining(d.leg)
                cap = d.leg == "harness" and bud.harness_share_cap is not None and left < bud.remaining("weights")
                why = f"share cap, {left} left" if cap else f"{left} left"
                return Next(other, f"{d.leg} budget spent ({why}): {other} leg instead ({d.reason})", d.switched)
        return Next(d.leg, d.reason, d.switched)
