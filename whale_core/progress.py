"""Progress events of a run's legs, as stdlib log records: the one channel between the legs and whatever shows them.

A leg reports through the functions here (`grpo_step`, `candidate_scored`, `leg_result`); each logs one ``INFO``
record on the ``whale.progress`` logger with its fields in ``record.whale_event`` (a dict with ``kind``). The message
is the human-readable line, so a plain log file (or Prefect's run logger, which picks up ``whale`` loggers) reads
well, while a console renderer (`whale_cli.progress`) turns the events into one live line per leg. Nothing here
depends on the renderer: with none installed the records go wherever logging sends them.
"""

from __future__ import annotations

import logging
import math
from typing import Any

LOGGER = logging.getLogger("whale.progress")
LOGGER.setLevel(logging.INFO)  # events are INFO records: not held back by a WARNING root


def emit(message: str, kind: str, **fields: Any) -> None:
    """Log one progress event (``fields`` plus ``kind``) with ``message`` as its text."""
    LOGGER.info(message, extra={"whale_event": {"kind": kind, **fields}})


def event_of(record: logging.LogRecord) -> dict[str, Any] | None:
    """The event a record carries, or None for an ordinary log record."""
    ev = getattr(record, "whale_event", None)
    return ev if isinstance(ev, dict) else None


def grpo_step(iteration: int | None, step: int, total: int, reward: float) -> None:
    """A weights leg finished GRPO optimizer step ``step`` of ``total`` with mean reward ``reward``."""
    emit(f"GRPO step {step}/{total} reward {reward:.3f}", "grpo_step", iteration=iteration, step=step, total=total,
         reward=reward)  # fmt: skip


def candidate_scored(iteration: int | None, scored: int, total: int, best: float | None) -> None:
    """A harness leg finished scoring a candidate block: ``scored`` of ``total`` blocks, best mean score so far."""
    best_s = "-" if best is None else f"{best:.3f}"
    emit(f"candidates scored {scored}/{total}, best so far {best_s}", "candidate_scored", iteration=iteration,
         scored=scored, total=total, best=best)  # fmt: skip


def leg_result(
    iteration: int, leg: str, before: float, after: float, seconds: float, *, accepted: str | None = None,
    candidates: int | None = None,
) -> None:  # fmt: skip
    """A leg ended: validation score before and after, the accepted harness (sha12) for a harness leg."""
    mins, secs = divmod(round(seconds), 60)
    took = f"{mins} m {secs:02d} s" if mins else f"{secs} s"
    extra = ""
    if leg == "harness":
        extra = f", accepted {accepted}" if accepted else ", incumbent kept"
        if candidates is not None:
            extra += f" ({candidates} candidates, {took})"
        else:
            extra += f" ({took})"
    else:
        extra = f" ({took})"
    # one leg on its own (whale search, whale train) measures no val pair around it: no "val nan → nan"
    scores = "" if math.isnan(before) or math.isnan(after) else f" val {before:.3f} → {after:.3f}"
    if not scores and leg != "harness":
        scores = " trained"
    line = f"iter {iteration} {leg}:{scores}{extra}".replace(":,", ":", 1)
    emit(line, "leg_result", iteration=iteration, leg=leg,
         before=before, after=after, seconds=seconds, accepted=accepted, candidates=candidates)  # fmt: skip
