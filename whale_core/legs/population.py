"""The harness population of the weights leg: training on prompts of several harnesses, not the incumbent alone.

Mitigation of co-overfitting (measured by the robustness matrix, `whale_core.science.robustness`):
`PopulationConfig` (``weights.population``) says how many of the archive's best val-scored harnesses join the
incumbent; `population_harnesses` picks them (the iteration flow calls it), skipping a harness that renders the same
prompts as one already in (`input_signature` on a `Probe`); `assign_population` says which member renders each train
problem (`whale_core.legs.weights_leg.train_weights_leg` renders and rewards them). Simplified: a harness in a
population is used as is (its own few-shot, encoding and parse).

The probe, the input signature and the archive's best val harnesses live here because the population needs them;
the robustness matrix reuses them (it imports this module, never the other way round).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from whale_core.harness import Harness, HarnessError
from whale_core.suites.base import Problem

if TYPE_CHECKING:
    from whale_core.records.archive import Archive


class PopulationConfig(BaseModel):
    """Mitigation: the weights leg renders its GRPO prompts with a population of harnesses, not the incumbent alone.

    ``k`` = 0 is off (incumbent only). With ``k`` ≥ 1 the population is the incumbent plus the ``k`` best other
    harnesses the run's archive scored on val (`population_harnesses`); each train problem is rendered by one member
    (`assign_population`, seeded, balanced), and its completions are parsed by that member. A member must score at
    least ``min_score_ratio`` x the incumbent's val score: early in a run the "top-k" holds poor harnesses (e.g. a
    reversed-answer format at a fifth of the incumbent's score), and training on their prompts teaches the model a
    format it then uses on the incumbent's prompts too (measured: docs/results.md).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    k: int = Field(0, ge=0, le=16, description="other harnesses in the population besides the incumbent (0: off)")
    incumbent_weight: float = Field(
        0.5, gt=0.0, le=1.0, description="fraction of train problems rendered by the incumbent when k >= 1"
    )
    min_score_ratio: float = Field(
        0.75, ge=0.0, le=1.0, description="a member's best val score must reach this share of the incumbent's"
    )


# ----------------------------------------------------------------------------------------------------- harnesses
@dataclass(frozen=True)
class Probe:
    """Problems to compare harnesses on (rendered with demos from ``pool``, the train split, under ``seed``)."""

    problems: Sequence[Problem]
    pool: Sequence[Problem]
    seed: int = 0


def probe_of(suite: Any, split: str, n: int = 16, seed: int = 0) -> Probe:
    """The first ``n`` problems of ``split``, with the train split as the demo pool."""
    return Probe(list(suite.problems(split))[:n], list(suite.problems("train")), seed)


def input_signature(harness: Harness, probe: Probe, sampling: bool = True) -> str:
    """A hash of everything the model sees and how it is sampled: each probe problem's rendered input (chat
    harnesses: the rendered messages, so no tokenizer is needed; a problem that fails to render counts as its
    error), plus ``decoding`` and ``inference`` unless ``sampling`` is False (prompts only: what a GRPO population
    member contributes, since training samples with the weights config's own temperature). Equal signatures = the
    model gets the same inputs; only parsing (what happens after generation) can differ."""
    from whale_core.harness import chat as _chat

    spec = harness.spec
    digest = hashlib.sha256()
    for p in probe.problems:
        try:
            demos = harness.select_demos(p, probe.pool, probe.seed)
            if spec.messages is None:
                item: Any = harness.render(p, demos)
            else:
                msgs = [(m.role, m.content) for m in spec.messages]
                item = _chat.chat_messages(msgs, spec.instruction, p, demos, harness.encode_answer)
        except Exception as exc:  # a render failure is part of what the model (does not) see
            item = f"<render error {type(exc).__name__}: {exc}>"
        digest.update(repr(item).encode() + b"\0")
    if sampling:
        digest.update(repr(spec.decoding.model_dump()).encode())
        digest.update(repr(spec.inference.model_dump()).encode())
    return digest.hexdigest()


def best_val_harnesses(
    archive: Archive, run_id: str, k: int, exclude: Iterable[str] = (), as_of: datetime | None = None
) -> list[tuple[str, float]]:
    """The ``k`` harnesses with the best val score in a run (any checkpoint; per harness the evaluation with the
    largest n, then the latest), as (sha, score), best first; shas in ``exclude`` are skipped; with ``as_of`` only
    evaluations created before it count (a replayed leg sees what the first attempt saw)."""
    best = archive.best_evaluations(run_id, split="val", as_of=as_of)
    skip = set(exclude)
    rows = sorted(((sha, e.score) for sha, e in best.items() if sha not in skip), key=lambda t: (-t[1], t[0]))
    return rows[:k]


# ---------------------------------------------------------------------------------------------------- mitigation
def population_harnesses(
    archive: Archive,
    run_id: str,
    incumbent: Harness,
    k: int,
    as_of: datetime | None = None,
    probe: Probe | None = None,
    min_score_ratio: float = 0.0,
) -> list[Harness]:
    """The incumbent, then up to ``k`` other harnesses with the best val scores in the run's archive (parseable
    ones only; evaluations before ``as_of`` when given). With a ``probe``, a harness that renders the same prompts
    as the incumbent or an earlier member (`input_signature` without sampling settings: a member that differs only in
    temperature or votes trains exactly like the incumbent) is skipped. ``k`` = 0 gives ``[incumbent]``; fewer than
    ``k`` others when the archive holds fewer distinct ones. With ``min_score_ratio`` > 0, a harness whose val score
    is below that share of the incumbent's is skipped (no floor when the incumbent has no val score)."""
    out = [incumbent]
    if k <= 0:
        return out
    inputs = {input_signature(incumbent, probe, sampling=False)} if probe else set()
    ranked = best_val_harnesses(archive, run_id, 10_000, as_of=as_of)
    own = next((score for sha, score in ranked if sha == incumbent.sha), None)
    floor = min_score_ratio * own if own is not None else 0.0
    for sha, score in [(sha, score) for sha, score in ranked if sha != incumbent.sha][: 8 * k + 8]:
        if score < floor:
            break  # best first: the rest are lower still
        try:
            h = Harness.from_text(archive.get_harness(sha).text, parent=None)
        except (HarnessError, LookupError):
            continue
        if probe is not None:
            sig = input_signature(h, probe, sampling=False)
            if sig in inputs:
                continue
            inputs.add(sig)
        out.append(h)
        if len(out) == k + 1:
            break
    return out


def assign_population(problem_ids: Sequence[str], size: int, seed: int, incumbent_weight: float = 0.5) -> list[int]:
    """Which population member renders each train problem: index 0 (the incumbent) for a ``incumbent_weight``
    share, the others round-robin over the rest. Deterministic in (ids, size, seed); independent of Python's hash."""
    if size < 1:
        raise ValueError(f"population size must be >= 1 (got {size})")
    order = sorted(range(len(problem_ids)), key=lambda i: hashlib.sha256(f"{seed}|{problem_ids[i]}".encode()).digest())
    out = [0] * len(problem_ids)
    if size == 1:
        return out
    n_inc = round(incumbent_weight * len(problem_ids))
    rng = random.Random(seed)
    others = list(range(1, size))
    rng.shuffle(others)
    for rank, i in enumerate(order[n_inc:]):
        out[i] = others[rank % len(others)]
    return out
