"""The engine's calls that must be cached and retried, as one small injected interface: `Calls`.

The block-ascent engine (`whale_core.ascent.engine`) never touches an orchestrator. Every call whose result is worth
keeping across a crash — a rollout, a GRPO update, a proposer request, a candidate's scoring, the scheduler's decision
— and the unit of orchestration itself (one iteration) reach it through `Calls`. ``flows/`` implements it with Prefect
tasks and subflows (content-addressed cache keys, persisted results, retries); `whale_core.ascent.local.LocalCalls`
runs each call in this process with nothing cached (unit tests, ``whale search``, ``whale train``).

Contract, for every implementation:
- a call is a pure function of its arguments and the run's config: the same arguments give the same result (an
  orchestrator may return a stored one); ``Site.refresh`` asks for a recomputation (``whale rerun``);
- calls take and return small records (refs, configs, scores, proposal texts), never models or datasets;
- `Calls.propose` raises `ProposerUnavailable` when the proposer stays unreachable after its retries, and returns
  the proposals as plain texts: the harness leg validates them (`whale_core.proposers.base.check_candidate`, once);
- an exception from any other call is systemic and propagates (one bad example or candidate never raises: it is a
  zero score with its error in the trace, or a recorded rejection);
- `Calls.iteration` runs ``body`` once and returns what it returns (an orchestrator wraps it in its own unit, e.g. a
  Prefect subflow named ``RUN/iter-01-weights``); `Calls.leg_done` and `Calls.link` are the orchestrator's own view of
  a leg (a leaderboard artifact, a URL to link from MLflow) and may do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from whale_core.harness import Harness
    from whale_core.legs.leg import LegKind
    from whale_core.legs.schedule import Decision, LegOutcome
    from whale_core.legs.scoring import ScoreBlock
    from whale_core.legs.weights_config import WeightsConfig
    from whale_core.legs.weights_leg import WeightsOutcome
    from whale_core.proposers.base import ProposalContext
    from whale_core.records.refs import HarnessRef, PolicyRef

T = TypeVar("T")
Split = Literal["train", "val", "test"]


@dataclass(frozen=True)
class Site:
    """Where a call is made: ``label`` names it for the orchestrator (a task-run name such as
    ``rollout-val-iter3``), ``iteration`` is the block-ascent iteration it serves (None: the run's own calls) and
    ``refresh`` asks for a recomputation instead of a stored result (the iteration ``whale rerun`` recomputes)."""

    label: str
    iteration: int | None = None
    refresh: bool = False


@dataclass(frozen=True)
class Evaluation:
    """A (policy, harness) pair's rollout on the first ``n`` problems of a split: the mean score, its per-problem
    ``scores`` (in problem order: two evaluations on the same split and ``n`` are paired), the completions and tokens
    it generated, and where its traces are."""

    score: float
    n: int
    completions: int
    prompt_tokens: int
    completion_tokens: int
    traces_path: str
    seconds: float
    scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class ProposedText:
    """One proposal as a `Calls.propose` returns it: the text (None when the proposer produced none), the proposer's
    verdict (``valid`` or ``rejected`` with a ``reason``), the parent harness sha it was derived from, and its usage."""

    text: str | None
    status: str
    reason: str | None
    proposer: str
    parent: str | None = None
    usage: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainJob:
    """One GRPO update: from ``policy`` (its checkpoint applied to ``base``) against ``harness`` (and the
    mitigation's ``population``), with the leg's ``weights`` config (its ``seed`` already the leg's:
    `whale_core.seeds.weights_leg_seed`), at most
    ``max_completions``, into ``out_dir`` (relative to the home when under it, so the job's identity survives a moved
    home; a retry or a resumed run continues from the TRL checkpoints there);
    ``generation`` counts ``whale rerun``s of the leg (a new generation trains again)."""

    base: PolicyRef
    policy: PolicyRef
    harness: HarnessRef
    weights: WeightsConfig
    max_completions: int
    out_dir: str
    generation: int = 0
    population: tuple[HarnessRef, ...] = ()


class Calls(Protocol):
    """The engine's cached, retried calls and its unit of orchestration (see the module docstring)."""

    def rollout(self, policy: PolicyRef, harness: HarnessRef, split: Split, n: int, site: Site) -> Evaluation:
        """Evaluate the pair on the first ``n`` problems of ``split`` (val: the run's seeded validation order)."""
        ...

    def schedule(self, history: Sequence[LegOutcome], site: Site) -> Decision:
        """The scheduler's choice of the next leg from the metric history (the ``plateau-check``)."""
        ...

    def train(self, job: TrainJob, site: Site) -> WeightsOutcome:
        """One GRPO update (the ``grpo-update``)."""
        ...

    def propose(self, context: ProposalContext, k: int, seed: int, site: Site) -> list[ProposedText]:
        """Up to ``k`` proposals from the run's proposer seeded with ``seed`` (the ``propose-harness``)."""
        ...

    def score(self, policy: PolicyRef, jobs: Sequence[tuple[Harness, int, int]], site: Site) -> list[ScoreBlock]:
        """Each job's harness scored on problems ``[start, end)`` of the run's validation order under ``policy``
        (one ``score-harness`` each), in the order given."""
        ...

    def iteration(self, iteration: int, kind: LegKind, body: Callable[[], T]) -> T:
        """Run one block-ascent iteration's ``body`` (an orchestrator's unit of work) and return its result."""
        ...

    def leg_done(self, iteration: int, kind: LegKind, leg_id: int, policy_id: str) -> None:
        """A leg ended and is recorded (an orchestrator may show it, e.g. a harness leg's leaderboard)."""
        ...

    def link(self) -> str | None:
        """A URL of the orchestrator's record of what runs now (linked from the MLflow run), or None."""
        ...
