"""``block-ascent-iteration``: one iteration = plateau-check → one leg (weights or harness) → evaluate → record.

The flow only wires: the decision comes from `tasks.plateau_check`; the leg is a `whale_core.legs.leg.Leg` — the
weights leg `whale_core.legs.weights_leg.WeightsLeg` (its training call is `tasks.grpo_update`), the harness leg
`whale_core.legs.harness_leg.HarnessLeg` with its proposer call routed through `tasks.propose_harness` and its candidate
scoring through `tasks.score_harness` (in the flow's thread by default, fanned out on the flow's task runner with
``orchestration.max_workers`` > 1 or Dask) —; the evaluation is `tasks.rollout_task`. Every record goes through one
`whale_core.records.recorder.Recorder`: the archive and its MLflow mirror (a child run per leg).

Replay: when the archive already holds this iteration's leg as done with the same inputs (a resumed run), the tasks
run again — and come back ``Cached`` — but nothing is written twice. A rerun (``refresh``) recomputes the tasks.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prefect import flow

from flows import prefect_ui
from flows.common import IterState, RunHandles
from tasks import grpo_update, plateau_check, propose_harness, rollout_task, score_harness
from whale_core import progress
from whale_core.legs.budget import Budget
from whale_core.legs.harness_leg import HarnessLeg, HarnessLegOptions
from whale_core.legs.leg import Leg, LegResult, LegStart
from whale_core.legs.schedule import Decision, LegOutcome, budget_redirect
from whale_core.legs.scoring import ScoreBlock
from whale_core.legs.weights_leg import WeightsLeg
from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable, check_candidate
from whale_core.records.lineage import leg_run_name
from whale_core.records.recorder import Recorder, suite_splits
from whale_core.records.refs import HarnessRef, PolicyRef


@dataclass(frozen=True)
class IterationResult:
    state: IterState
    outcome: LegOutcome
    decision: Decision
    budget: dict[str, Any]
    completions: int
    replayed: bool


class _TaskProposer:
    """A `Proposer` whose call is the cached, retried ``propose-harness`` task."""

    def __init__(
        self, search: dict[str, Any], seed: int, incumbent: Any, restrict_to: Any, opts: dict[str, Any], name: str
    ):
        self.name = str(search.get("proposer", "mutate"))
        self.search, self.seed, self.incumbent, self.restrict_to = search, seed, incumbent, restrict_to
        self.opts = {**opts, "task_run_name": name}

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        state = propose_harness.with_options(**self.opts)(context, k, self.search, self.seed, return_state=True)
        if not state.is_completed():
            raise ProposerUnavailable(f"proposer {self.name} failed after retries: {state.message}")
        out: list[Proposal] = []
        for rec in state.result():
            if rec.status == "valid" and rec.text:
                p = check_candidate(rec.text, self.incumbent, self.restrict_to, rec.proposer)
            else:
                p = Proposal(rec.text, None, "rejected", rec.reason, rec.proposer)
            out.append(dataclasses.replace(p, usage=dict(rec.usage)))
        return out


def _matching_done_leg(h: RunHandles, iteration: int, kind: str, state: IterState) -> Any:
    for leg in h.archive.legs(h.run_id):
        if (leg.iteration, leg.kind, leg.status) == (iteration, kind, "done") and (
            leg.incumbent_harness_in == state.harness.sha and leg.checkpoint_in == state.policy.checkpoint_id
        ):
            return leg
    return None


def _close_earlier_attempts(h: RunHandles, iteration: int, kind: str, refresh: bool, generation: int) -> Any:
    """Mark this iteration's earlier attempts of the leg as history (left out of the report's tables): one still
    ``running`` died with its process, one ``done`` is superseded by a rerun. Returns when the first began."""
    earlier = [leg for leg in h.archive.legs(h.run_id) if leg.iteration == iteration and leg.kind == kind]
    for stale in earlier:
        if stale.status == "running":  # its process died (a resumed run): this attempt takes over
            h.archive.end_attempt(stale.id, "interrupted", "its process ended before the leg finished")
        elif refresh and stale.status == "done":
            h.archive.end_attempt(stale.id, "superseded", f"recomputed by whale rerun (generation {generation})")
    return min((leg.started for leg in earlier), default=None)


@flow(name="block-ascent-iteration", flow_run_name="{run_id}/iter-{iteration:02d}", persist_result=True)
def block_ascent_iteration(
    run_id: str,
    config: dict[str, Any],
    iteration: int,
    state: IterState,
    base: PolicyRef,
    history: list[LegOutcome],
    budget: dict[str, Any],
    refresh: bool = False,
    generation: int = 0,
) -> IterationResult:
    from whale_core.config import WhaleConfig

    cfg = WhaleConfig.model_validate(config)
    h = RunHandles.open(run_id, cfg)
    bud = Budget.from_dict(budget)
    opts: dict[str, Any] = {"refresh_cache": True} if refresh else {}
    decision = plateau_check.with_options(**opts, task_run_name=f"plateau-check-iter{iteration}")(
        history, cfg.mode, cfg.schedule.model_dump(mode="json"), iteration
    )
    decision = budget_redirect(
        decision, cfg.mode, bud.remaining("harness"), bud.remaining("weights"), cfg.min_completions("harness")
    )
    kind = decision.leg
    # named like the leg's MLflow run now that the leg is known; tagged on the flow run only (tasks do not inherit)
    prefect_ui.label_flow_run(f"{run_id}/{leg_run_name(iteration, kind)}", [run_id, cfg.mode, kind])
    done = None if refresh else _matching_done_leg(h, iteration, kind, state)
    rec = Recorder(
        h.archive, h.lineage, run_id=run_id, mlflow_parent=h.mlflow_parent, replay=done is not None,
        idempotent_decisions=True, splits=run_splits(cfg),
    )  # fmt: skip
    as_of = _close_earlier_attempts(h, iteration, kind, refresh, generation)
    rec.decide(iteration, "switch" if decision.switched else "continue", decision.reason, {"leg": kind})
    leg = rec.archive.start_leg(
        run_id, iteration, kind, incumbent_harness_in=state.harness.sha, checkpoint_in=state.policy.checkpoint_id
    )
    rec.mlflow_run = child = h.lineage.ensure_leg(
        h.mlflow_parent, run_id, iteration, kind, existing_mlflow_run_id=done.mlflow_run_id if done else None
    )
    if done is None:
        h.archive.set_leg_mlflow_run(leg.id, child)
    url = prefect_ui.flow_run_url()
    if url:
        h.lineage.client.set_tag(child, "whale.prefect_flow_run", url)
    spent_before = bud.spent
    t0 = time.monotonic()
    try:
        if kind == "weights":
            step: Leg = _weights_leg(h, cfg, iteration, state, base, opts, generation, rec, as_of or leg.started)
        else:
            step = _harness_leg(h, cfg, iteration, state, opts, rec)
        res = step.run(LegStart(run_id, iteration, state.policy, state.harness, state.metric, bud, leg.id, as_of))
        metric = _evaluate(h, cfg, opts, state, res, bud, iteration)
    except Exception as exc:
        if done is None:
            h.archive.fail_leg(leg.id, f"{type(exc).__name__}: {exc}", budget_used=bud.spent - spent_before)
        h.lineage.end(child, "FAILED")
        raise
    used = bud.spent - spent_before
    metrics = {
        "val_score": metric,
        "val_score_before": state.metric,
        "budget_used": float(used),
    }
    if kind == "harness":  # a weights leg accepts nothing: no metric rather than a -1
        metrics["accepted"] = float(bool(res.accepted))
    rec.leg_done(
        leg.id, iteration, budget_used=used, harness_sha=res.harness.sha, checkpoint_id=res.policy.checkpoint_id,
        metrics=metrics, rollouts=state.rollouts + used,
    )  # fmt: skip
    h.lineage.end(child)
    if kind == "harness":
        prefect_ui.leaderboard_artifact(h.archive, run_id, leg.id, iteration, state.policy.checkpoint_id)
    progress.leg_result(
        iteration, kind, state.metric, metric, time.monotonic() - t0,
        accepted=res.harness.sha[:12] if res.accepted else None,
        candidates=int(res.metrics["candidates"]) if "candidates" in res.metrics else None,
    )  # fmt: skip
    outcome = LegOutcome(iteration, kind, metric, res.accepted if kind == "harness" else None, state.metric)
    new_state = IterState(res.policy, res.harness, metric, state.rollouts + used)
    return IterationResult(new_state, outcome, decision, bud.to_dict(), used, done is not None)


def run_splits(cfg: Any) -> dict[str, dict[str, Any]]:
    """The run's val and test splits as the `Recorder` names them in MLflow (datasets of the scores)."""
    suite, rollout = cfg.suite.model_dump(mode="json"), cfg.rollout
    return suite_splits(suite, cfg.seed, rollout.val_problems, rollout.test_problems)


def _evaluate(
    h: RunHandles, cfg: Any, opts: dict[str, Any], state: IterState, res: LegResult, bud: Budget, iteration: int
) -> float:
    """The validation score of the pair the leg ends with (the start's when the leg changed nothing); the
    evaluation is charged to the leg's kind."""
    if (res.policy, res.harness) == (state.policy, state.harness):
        return state.metric
    ev = rollout_task.with_options(**opts, task_run_name=f"rollout-val-iter{iteration}")(
        res.policy,
        res.harness,
        cfg.suite.model_dump(mode="json"),
        "val",
        cfg.rollout.val_problems,
        cfg.seed,
        cfg.rollout.batch_size,
        str(h.run_dir / "traces"),
    )
    bud.charge(res.kind, min(ev.completions, bud.remaining(res.kind)))
    return float(ev.score)


def _population(h: RunHandles, cfg: Any, state: IterState, as_of: Any) -> list[HarnessRef]:
    """The mitigation's extra harnesses for this weights leg (``weights.population.k`` best val-scored harnesses of
    the run that feed the model other inputs than the incumbent and score at least ``min_score_ratio`` of its val
    score, from evaluations before the leg first started); empty when off."""
    k = cfg.weights.population.k
    if k <= 0:
        return []
    from tasks.runtime import suite_of
    from whale_core.legs.population import population_harnesses, probe_of

    probe = probe_of(suite_of(cfg.suite.model_dump(mode="json")), "train", 16, cfg.seed)
    members = population_harnesses(
        h.archive, h.run_id, state.harness.load(), k, as_of=as_of, probe=probe,
        min_score_ratio=cfg.weights.population.min_score_ratio,
    )  # fmt: skip
    return [HarnessRef.of(m) for m in members[1:]]


def _weights_leg(
    h: RunHandles,
    cfg: Any,
    iteration: int,
    state: IterState,
    base: PolicyRef,
    opts: dict[str, Any],
    generation: int,
    rec: Recorder,
    as_of: datetime,
) -> WeightsLeg:
    """This iteration's weights leg: the cached ``grpo-update`` task with its population (as of ``as_of``)."""
    from tasks.runtime import suite_of

    population = _population(h, cfg, state, as_of)
    out_dir = h.run_dir / f"iter-{iteration:02d}-weights" / f"gen-{generation}"
    suite_cfg, weights_cfg = cfg.suite.model_dump(mode="json"), cfg.weights.model_dump(mode="json")

    def train(policy: PolicyRef, harness: HarnessRef, cap: int) -> Any:
        return grpo_update.with_options(**opts, task_run_name=f"grpo-update-iter{iteration}")(
            policy, base, harness, suite_cfg, weights_cfg, cfg.seed, iteration, generation, cap, str(out_dir),
            population,
        )  # fmt: skip

    return WeightsLeg(
        base, suite_of(suite_cfg), cfg.weights, out_dir, population=population, reserve=cfg.rollout.val_problems,
        recorder=rec, train=train,
    )  # fmt: skip


def _harness_leg(
    h: RunHandles, cfg: Any, iteration: int, state: IterState, opts: dict[str, Any], rec: Recorder
) -> HarnessLeg:
    """This iteration's harness leg: proposals from the cached ``propose-harness`` task, candidate blocks scored by
    the cached ``score-harness`` task (inline, or fanned out on the flow's task runner)."""
    from tasks.runtime import suite_of

    incumbent = state.harness.load()
    restrict = frozenset({"instruction"}) if cfg.mode == "prompt-weights" else None
    suite_cfg = cfg.suite.model_dump(mode="json")
    rounds = list(cfg.search.rounds)
    totals: dict[str, list[float]] = {}  # per harness: [sum of scores, problems scored] for the progress line

    def score(hh: Any, j: int) -> Any:  # round r: the halving round whose problem count the block reaches
        r = sum(1 for n in rounds if n < j)
        return score_harness.with_options(**opts, task_run_name=f"score-harness-{hh.sha[:12]}-r{r}")

    def scored(hh: Any, block: ScoreBlock) -> ScoreBlock:
        t = totals.setdefault(hh.sha, [0.0, 0.0])
        t[0], t[1] = t[0] + sum(block.scores), t[1] + len(block.scores)
        best = max((a / n for a, n in totals.values() if n), default=None)
        progress.candidate_scored(iteration, len(totals), cfg.search.candidates + 1, best)
        return block

    def roll_many(jobs: list[tuple[Any, int, int]]) -> list[ScoreBlock]:
        seed, batch = cfg.seed, cfg.rollout.batch_size
        args = [(hh, (state.policy, HarnessRef.of(hh), suite_cfg, i, j, seed, batch)) for hh, i, j in jobs]
        if cfg.orchestration.inline:  # one worker: in this thread (see OrchestrationConfig for why)
            return [scored(hh, score(hh, a[4])(*a)) for hh, a in args]
        futures = [(hh, score(hh, a[4]).submit(*a)) for hh, a in args]
        return [scored(hh, f.result()) for hh, f in futures]

    options = HarnessLegOptions(cfg.search, cfg.seed, h.run_dir / "traces", cfg.rollout.batch_size, restrict)
    search = cfg.search.model_dump(mode="json")
    name = f"propose-harness-iter{iteration}"
    proposer = _TaskProposer(search, cfg.seed + iteration, incumbent, restrict, opts, name)
    return HarnessLeg(options, suite_of(suite_cfg), rec, proposer=proposer, roll_many=roll_many)
