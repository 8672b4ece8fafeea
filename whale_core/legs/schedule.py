"""Schedulers: given the metric history, which leg runs next (``weights`` or ``harness``) and why.

Two schedulers read the same history (one `LegOutcome` per finished leg):

- `FixedScheduler` alternates phases of fixed length (``phase.weights`` weights legs, then ``phase.harness``
  harness legs, ...), starting with ``start``.
- `AdaptiveScheduler` stays on the active leg until its metric plateaus — no improvement beyond ``min_delta`` on an
  exponentially smoothed curve within a ``patience`` window of that phase — or, on the harness leg, until
  ``harness_patience`` consecutive harness legs accepted no candidate; ``max_phase`` caps a phase either way.

The stop conditions and the budget redirect that may overrule a scheduler live with the decider that applies them
(`whale_core.ascent.decider`).

Modes restrict the legs: ``weights-only`` always trains, ``harness-only`` always searches; ``prompt-weights`` and the
``whale-*`` modes alternate. Every decision carries a human-readable reason that the archive and MLflow record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from whale_core.legs.leg import LegKind
from whale_core.proposers.base import PROMPT_ONLY


class PhaseConfig(BaseModel):
    """Phase lengths of the fixed schedule (``whale-fixed``, ``prompt-weights``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    weights: int = Field(1, ge=1, le=100, description="weights legs per phase before switching (fixed schedule)")
    harness: int = Field(1, ge=1, le=100, description="harness legs per phase before switching (fixed schedule)")


class ScheduleConfig(BaseModel):
    """Leg scheduling. The run mode picks the scheduler: ``whale-adaptive`` reads the adaptive keys, ``whale-fixed``
    and ``prompt-weights`` the phase lengths; ``weights-only``/``harness-only`` read none."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    start: LegKind = Field("harness", description="the first leg of an alternating mode: weights | harness")
    phase: PhaseConfig = Field(
        default_factory=PhaseConfig, description="phase lengths of the fixed schedule (whale-fixed, prompt-weights)"
    )
    patience: int = Field(2, ge=1, le=50, description="adaptive: legs without smoothed val improvement before a switch")
    min_delta: float = Field(
        0.01, ge=0.0, le=1.0, description="adaptive: val-score improvement that counts (absolute, score in [0, 1])"
    )
    smoothing: float = Field(
        0.5, gt=0.0, le=1.0, description="adaptive: EMA weight of the newest val score (1 = no smoothing)"
    )
    harness_patience: int = Field(
        1, ge=1, le=50, description="adaptive: consecutive harness legs with no accepted candidate before a switch"
    )
    max_phase: int = Field(6, ge=1, le=1000, description="adaptive: longest phase in legs, whatever the metric does")
    continue_from: Literal["last", "best"] = Field(
        "last",
        description="what each leg starts from: last = the pair the previous leg ended with | best = the best pair "
        "by val score the run has visited (a regressed weights leg is then not built on)",
    )
    stop_patience: int | None = Field(
        None,
        ge=1,
        le=100,
        description="stop the run once every leg kind the mode runs has had this many legs of its own in a row "
        "without a val gain beyond min_delta (recorded as a stop decision); null = never stop early",
    )


@dataclass(frozen=True)
class LegOutcome:
    """One finished leg: which leg, the validation metric after it, and (harness legs) whether a candidate won."""

    iteration: int
    leg: LegKind
    metric: float
    accepted: bool | None = None
    metric_before: float | None = None


@dataclass(frozen=True)
class Decision:
    leg: LegKind
    reason: str
    switched: bool


class Scheduler(Protocol):
    """Contract: ``next_leg(history)`` is a pure function of the history (so a resumed run decides the same)."""

    def next_leg(self, history: Sequence[LegOutcome]) -> Decision: ...


def _other(leg: LegKind) -> LegKind:
    return "harness" if leg == "weights" else "weights"


def current_phase(history: Sequence[LegOutcome]) -> list[LegOutcome]:
    """The trailing run of legs of the same kind (the active phase)."""
    if not history:
        return []
    leg = history[-1].leg
    phase: list[LegOutcome] = []
    for outcome in reversed(history):
        if outcome.leg != leg:
            break
        phase.append(outcome)
    return list(reversed(phase))


def smooth(values: Sequence[float], alpha: float) -> list[float]:
    """Exponential moving average; ``alpha`` is the weight of the newest value."""
    out: list[float] = []
    for v in values:
        out.append(v if not out else alpha * v + (1 - alpha) * out[-1])
    return out


def plateaued(values: Sequence[float], *, patience: int, min_delta: float, alpha: float) -> tuple[bool, str]:
    """Whether a curve has plateaued: the last ``patience`` smoothed points never beat the best before them by more
    than ``min_delta``. ``values[0]`` is the metric when the phase began. Needs ``patience + 1`` points."""
    if len(values) < patience + 1:
        return False, f"{len(values) - 1} leg(s) into the phase, patience {patience}"
    s = smooth(values, alpha)
    best_before = max(s[: len(s) - patience])
    recent = max(s[len(s) - patience :])
    if recent <= best_before + min_delta:
        return True, (
            f"plateau: smoothed metric {recent:.4f} in the last {patience} leg(s) did not beat "
            f"{best_before:.4f} + {min_delta}"
        )
    return False, f"improving: smoothed {recent:.4f} > {best_before:.4f} + {min_delta}"


class SingleLegScheduler:
    """``weights-only`` / ``harness-only``: the same leg every time."""

    def __init__(self, leg: LegKind):
        self.leg = leg

    def next_leg(self, history: Sequence[LegOutcome]) -> Decision:
        return Decision(self.leg, f"mode runs the {self.leg} leg only", switched=False)


class FixedScheduler:
    """Alternate fixed-length phases."""

    def __init__(self, cfg: ScheduleConfig):
        self.cfg = cfg

    def next_leg(self, history: Sequence[LegOutcome]) -> Decision:
        if not history:
            return Decision(self.cfg.start, f"first leg: {self.cfg.start}", switched=False)
        phase = current_phase(history)
        leg = phase[-1].leg
        length = self.cfg.phase.weights if leg == "weights" else self.cfg.phase.harness
        if len(phase) >= length:
            return Decision(_other(leg), f"fixed phase of {length} {leg} leg(s) done", switched=True)
        return Decision(leg, f"fixed phase: {len(phase)}/{length} {leg} legs", switched=False)


class AdaptiveScheduler:
    """Switch legs when the active leg's metric plateaus (or the harness leg stops winning)."""

    def __init__(self, cfg: ScheduleConfig):
        self.cfg = cfg

    def next_leg(self, history: Sequence[LegOutcome]) -> Decision:
        cfg = self.cfg
        if not history:
            return Decision(cfg.start, f"first leg: {cfg.start}", switched=False)
        phase = current_phase(history)
        leg = phase[-1].leg
        if len(phase) >= cfg.max_phase:
            return Decision(_other(leg), f"phase reached max_phase={cfg.max_phase}", switched=True)
        if leg == "harness":
            tail = phase[-cfg.harness_patience :]
            if len(tail) >= cfg.harness_patience and not any(o.accepted for o in tail):
                return Decision(
                    "weights", f"no candidate accepted in the last {cfg.harness_patience} harness leg(s)", True
                )
        start = phase[0].metric_before if phase[0].metric_before is not None else phase[0].metric
        values = [start, *[o.metric for o in phase]]
        flat, why = plateaued(values, patience=cfg.patience, min_delta=cfg.min_delta, alpha=cfg.smoothing)
        if flat:
            return Decision(_other(leg), f"{leg} leg {why}", switched=True)
        return Decision(leg, f"{leg} leg {why}", switched=False)


def make_scheduler(mode: str, cfg: ScheduleConfig) -> Scheduler:
    """The scheduler a run mode uses."""
    if mode == "weights-only":
        return SingleLegScheduler("weights")
    if mode == "harness-only":
        return SingleLegScheduler("harness")
    if mode == "whale-adaptive":
        return AdaptiveScheduler(cfg)
    if mode in ("whale-fixed", "prompt-weights"):
        return FixedScheduler(cfg)
    raise ValueError(
        f"unknown mode {mode!r}; valid: whale-adaptive, whale-fixed, weights-only, harness-only, prompt-weights"
    )


def mode_restriction(mode: str) -> frozenset[str] | None:
    """The harness fields a mode's harness leg may change: only the instruction in ``prompt-weights`` (the
    prompt+weights baseline), any (None) otherwise."""
    return PROMPT_ONLY if mode == "prompt-weights" else None


def mode_legs(mode: str) -> frozenset[LegKind]:
    """The leg kinds a run mode runs."""
    if mode == "weights-only":
        return frozenset({"weights"})
    if mode == "harness-only":
        return frozenset({"harness"})
    return frozenset({"weights", "harness"})
