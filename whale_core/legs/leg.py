"""The one interface both legs implement: start from a (policy, harness) pair, spend completions, end in a result.

A block-ascent iteration runs exactly one leg. The weights leg (`whale_core.legs.weights_leg`) keeps the harness and
returns a new policy; the harness leg (`whale_core.legs.harness_leg`) keeps the policy and returns the incumbent it
ends with. Both take a `LegStart` and return a `LegResult`; the engine (`whale_core.ascent.engine`, the one caller of
`Leg.run`) then evaluates the pair on validation itself (the same rollout after either leg), so a leg reports only
what it decided and what it spent.

Contract of `Leg.run`:
- charges every completion it generates to ``start.budget`` under its own kind, and never more than
  ``start.budget.remaining(kind)`` allows (a leg with nothing left returns the start pair unchanged);
- one bad candidate or one failed example is recorded (a rejection, a zero score with its error in the trace) and
  the leg goes on; only systemic faults (a dead database, an unloadable policy) raise;
- writes its records through the `Recorder` it was given, never twice for the same leg (a replayed leg writes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from whale_core.legs.budget import Budget
    from whale_core.records.refs import HarnessRef, PolicyRef

LegKind = Literal["weights", "harness"]


@dataclass(frozen=True)
class LegStart:
    """Where a leg starts: the pair it is handed, its iteration, and the run's shared budget (the leg charges it)."""

    run_id: str
    iteration: int
    policy: PolicyRef
    harness: HarnessRef
    metric: float  # validation score of (policy, harness) at the start
    budget: Budget
    leg_id: int | None = None  # the leg's archive row (its candidates and checkpoint name it), if any
    as_of: datetime | None = None  # a resumed or rerun leg reads only records older than its first attempt
    revisit: tuple[HarnessRef, ...] = ()  # harnesses a harness leg scores as candidates besides its proposals


@dataclass(frozen=True)
class LegResult:
    """What a leg ends with. ``accepted``: the harness leg's verdict (did a candidate replace the incumbent); the
    weights leg always ends in a new checkpoint and reports None. ``metrics`` are the leg's own figures (GRPO reward,
    candidates scored, ...), logged as they are."""

    kind: LegKind
    policy: PolicyRef
    harness: HarnessRef
    completions: int
    accepted: bool | None = None
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)


class Leg(Protocol):
    """One leg of block ascent (see the module docstring for the contract)."""

    kind: LegKind

    def run(self, start: LegStart) -> LegResult: ...
