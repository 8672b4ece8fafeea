"""`LocalCalls`: the engine's calls (`whale_core.ascent.calls.Calls`) run in this process, one after another.

Nothing is cached and nothing is retried here — that is an orchestrator's job (``flows/`` wraps the same functions in
Prefect tasks). Used by ``whale search`` and ``whale train`` (one leg each through the engine), and by the engine's
unit tests, which need neither Prefect nor a server.

The functions below are the calls' bodies, shared with the Prefect tasks (``tasks/``), so a cached task and a local
call compute the same thing: `evaluate_pair` (a rollout with its traces written), `train_job` (one GRPO update),
`propose_texts` (the proposer's replies as plain texts), `score_jobs` (candidate blocks on the validation order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from whale_core.ascent.calls import Evaluation, ProposedText, Site, Split, TrainJob
from whale_core.legs.scoring import ScoreBlock, problems_of, score_block
from whale_core.records.portable import from_home
from whale_core.records.refs import HarnessRef, PolicyRef, load_cached

if TYPE_CHECKING:
    from whale_core.config import WhaleConfig
    from whale_core.harness import Harness
    from whale_core.legs.leg import LegKind
    from whale_core.legs.schedule import Decision, LegOutcome
    from whale_core.legs.weights_leg import WeightsOutcome
    from whale_core.proposers.base import ProposalContext, Proposer
    from whale_core.suites.base import Suite

T = TypeVar("T")
Progress = Callable[[str, int, int], None]  # (split, done, total) during a rollout


def evaluate_pair(
    policy: Any,
    harness: HarnessRef,
    suite: Suite,
    split: Split,
    n: int,
    *,
    seed: int,
    batch_size: int,
    traces_dir: Path,
    progress: Progress | None = None,
) -> Evaluation:
    """``harness`` with the loaded ``policy`` on the first ``n`` problems of ``split`` (`problems_of`); the traces
    go to ``traces_dir/<split>-<sha12>-<policy16>-n<N>.jsonl``."""
    from whale_core.rollout import rollout

    problems = problems_of(suite, split, n, seed)
    report = None if progress is None else (lambda done, total: progress(split, done, total))
    result = rollout(
        policy, harness.load(), suite, problems, batch_size=batch_size, seed=seed, split=split, progress=report
    )
    path = Path(traces_dir) / f"{split}-{harness.sha[:12]}-{str(policy.policy_id)[:16]}-n{len(problems)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write_jsonl(path)
    return Evaluation(
        score=result.score,
        n=result.n,
        completions=result.completions,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        traces_path=str(path),
        seconds=result.seconds,
        scores=tuple(float(t.score) for t in result.traces),
    )


def train_job(job: TrainJob, suite: Suite, callbacks: Sequence[Any] = ()) -> WeightsOutcome:
    """One GRPO update as `TrainJob` describes it (`whale_core.legs.weights_leg.train_pair`)."""
    from whale_core.legs.weights_leg import train_pair

    return train_pair(
        job.base, job.policy, job.harness, suite, job.weights, out_dir=Path(from_home(job.out_dir)),
        max_completions=job.max_completions, population=list(job.population), callbacks=callbacks,
    )  # fmt: skip


def propose_texts(proposer: Proposer, context: ProposalContext, k: int) -> list[ProposedText]:
    """The proposer's proposals as plain texts (the harness leg validates them)."""
    return [
        ProposedText(
            p.text, p.status, p.reason, p.proposer, p.parent or (p.harness.parent if p.harness else None),
            dict(p.usage),
        )
        for p in proposer.propose(context, k)
    ]


def score_jobs(
    policy: Any, jobs: Sequence[tuple[Harness, int, int]], suite: Suite, *, seed: int, batch_size: int
) -> list[ScoreBlock]:
    """Each job's harness on problems ``[start, end)`` of the run's validation order."""
    problems = problems_of(suite, "val", max((end for _, _, end in jobs), default=0), seed)
    return [score_block(policy, h, suite, problems[a:b], batch_size=batch_size, seed=seed) for h, a, b in jobs]


class LocalCalls:
    """`Calls` in this process (see the module docstring). ``proposer``: use this one instead of the config's (tests);
    ``progress``: called during each rollout with (split, done, total)."""

    def __init__(
        self,
        cfg: WhaleConfig,
        suite: Suite,
        run_dir: Path,
        *,
        proposer: Proposer | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.cfg, self.suite, self.run_dir = cfg, suite, Path(run_dir)
        self.proposer, self.progress = proposer, progress

    def rollout(self, policy: PolicyRef, harness: HarnessRef, split: Split, n: int, site: Site) -> Evaluation:
        return evaluate_pair(
            load_cached(policy), harness, self.suite, split, n, seed=self.cfg.seed,
            batch_size=self.cfg.rollout.batch_size, traces_dir=self.run_dir / "traces", progress=self.progress,
        )  # fmt: skip

    def schedule(self, history: Sequence[LegOutcome], site: Site) -> Decision:
        from whale_core.legs.schedule import make_scheduler

        return make_scheduler(self.cfg.mode, self.cfg.schedule).next_leg(history)

    def train(self, job: TrainJob, site: Site) -> WeightsOutcome:
        return train_job(job, self.suite)

    def propose(self, context: ProposalContext, k: int, seed: int, site: Site) -> list[ProposedText]:
        from whale_core.legs.harness_config import make_proposer

        return propose_texts(self.proposer or make_proposer(self.cfg.search, seed), context, k)

    def score(self, policy: PolicyRef, jobs: Sequence[tuple[Harness, int, int]], site: Site) -> list[ScoreBlock]:
        return score_jobs(
            load_cached(policy), jobs, self.suite, seed=self.cfg.seed, batch_size=self.cfg.rollout.batch_size
        )

    def iteration(self, iteration: int, kind: LegKind, body: Callable[[], T]) -> T:
        return body()

    def leg_done(self, iteration: int, kind: LegKind, leg_id: int, policy_id: str) -> None:
        return None

    def link(self) -> str | None:
        return None
