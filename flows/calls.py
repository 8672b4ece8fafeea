"""`PrefectCalls`: the engine's calls (`whale_core.ascent.calls.Calls`) as Prefect tasks and subflows.

Wiring only: each call is one of ``tasks/`` with its content-addressed cache key and retries, named for what it does
and where (``rollout-val-iter3``, ``grpo-update-iter1``, ``score-harness-<sha12>-r<round>``); ``Site.refresh``
refreshes the cache (``whale rerun``). Each iteration is a subflow ``block-ascent-iteration`` named like the leg's
MLflow run (``RUN_ID/iter-01-weights``) and tagged with the run id, mode and leg (on the flow run only: task runs
carry no tags, see flows/whale_run.py). Candidate scoring runs in the flow's thread by default, or fans out on the
iteration's task runner (``orchestration``: more workers, or Dask).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from prefect import flow

from flows import prefect_ui
from flows.common import heartbeats, task_runner
from tasks import grpo_update, plateau_check, propose_harness, rollout_task, score_harness
from whale_core.ascent.calls import Evaluation, ProposedText, Site, Split, TrainJob
from whale_core.config import WhaleConfig
from whale_core.harness import Harness
from whale_core.legs.leg import LegKind
from whale_core.legs.schedule import Decision, LegOutcome
from whale_core.legs.scoring import ScoreBlock
from whale_core.legs.weights_leg import WeightsOutcome
from whale_core.proposers.base import ProposalContext, ProposerUnavailable
from whale_core.records.archive import Archive
from whale_core.records.lineage import leg_run_name
from whale_core.records.refs import HarnessRef, PolicyRef

T = TypeVar("T")


# The engine's iteration bodies, by token: a subflow runs in this process, and its parameters travel with every task
# it submits (a Dask worker gets the flow run's context), so the body (a closure over the engine) is not one of them.
_BODIES: dict[str, Callable[[], Any]] = {}


@flow(name="block-ascent-iteration", validate_parameters=False)
def block_ascent_iteration(run_id: str, iteration: int, leg: str, tags: list[str], body: str) -> Any:
    """One block-ascent iteration: the engine's body (decide, leg, evaluate, record; ``body`` is its token) as a
    Prefect flow run."""
    prefect_ui.label_flow_run(None, tags)  # the flow run's own tags: its tasks do not inherit them
    return _BODIES.pop(body)()


class PrefectCalls:
    """`Calls` through Prefect (see the module docstring); ``archive``: read for the leaderboard artifacts."""

    def __init__(self, cfg: WhaleConfig, run_id: str, run_dir: Path, archive: Archive) -> None:
        self.cfg, self.run_id, self.run_dir, self.archive = cfg, run_id, Path(run_dir), archive

    def _opts(self, site: Site) -> dict[str, Any]:
        return {"task_run_name": site.label, **({"refresh_cache": True} if site.refresh else {})}

    def rollout(self, policy: PolicyRef, harness: HarnessRef, split: Split, n: int, site: Site) -> Evaluation:
        cfg = self.cfg
        return rollout_task.with_options(**self._opts(site))(
            policy, harness, cfg.suite, split, n, cfg.seed, cfg.rollout.batch_size, str(self.run_dir / "traces")
        )

    def schedule(self, history: Sequence[LegOutcome], site: Site) -> Decision:
        return plateau_check.with_options(**self._opts(site))(
            list(history), self.cfg.mode, self.cfg.schedule, site.iteration or 0
        )

    def train(self, job: TrainJob, site: Site) -> WeightsOutcome:
        return grpo_update.with_options(**self._opts(site))(
            job.policy, job.base, job.harness, self.cfg.suite, job.weights, job.generation, job.max_completions,
            job.out_dir, list(job.population),
        )  # fmt: skip

    def propose(self, context: ProposalContext, k: int, seed: int, site: Site) -> list[ProposedText]:
        state = propose_harness.with_options(**self._opts(site))(context, k, self.cfg.search, seed, return_state=True)
        if not state.is_completed():
            raise ProposerUnavailable(f"proposer {self.cfg.search.proposer} failed after retries: {state.message}")
        return list(state.result())

    def score(self, policy: PolicyRef, jobs: Sequence[tuple[Harness, int, int]], site: Site) -> list[ScoreBlock]:
        cfg, rounds = self.cfg, self.cfg.search.rounds

        def task(h: Harness, end: int) -> Any:  # round r: the halving round whose problem count the block reaches
            r = sum(1 for n in rounds if n < end)
            return score_harness.with_options(
                **self._opts(Site(f"score-harness-{h.sha[:12]}-r{r}", site.iteration, site.refresh))
            )

        args = [(h, (policy, HarnessRef.of(h), cfg.suite, a, b, cfg.seed, cfg.rollout.batch_size)) for h, a, b in jobs]
        if cfg.orchestration.inline:  # one worker: in this thread (see OrchestrationConfig for why)
            return [task(h, a[4])(*a) for h, a in args]
        futures = [task(h, a[4]).submit(*a) for h, a in args]
        return [f.result() for f in futures]

    def iteration(self, iteration: int, kind: LegKind, body: Callable[[], T]) -> T:
        name = f"{self.run_id}/{leg_run_name(iteration, kind)}"
        sub = block_ascent_iteration.with_options(flow_run_name=name, task_runner=task_runner(self.cfg))
        token = uuid.uuid4().hex
        _BODIES[token] = body
        try:
            with heartbeats():
                return cast(T, sub(self.run_id, iteration, kind, [self.run_id, self.cfg.mode, kind], token))
        finally:
            _BODIES.pop(token, None)

    def leg_done(self, iteration: int, kind: LegKind, leg_id: int, policy_id: str) -> None:
        if kind == "harness":
            prefect_ui.leaderboard_artifact(self.archive, self.run_id, leg_id, iteration, policy_id)

    def link(self) -> str | None:
        return prefect_ui.flow_run_url()
