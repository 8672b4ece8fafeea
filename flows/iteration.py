"""``block-ascent-iteration``: one iteration = plateau-check → one leg (weights or harness) → evaluate → record.

The flow only wires: the decision comes from `tasks.plateau_check`, the weights leg is `tasks.grpo_update`, the
harness leg is `whale_core.legs.harness_leg.run_harness_leg` with its proposer call routed through
`tasks.propose_harness` and its candidate scoring through `tasks.score_harness` (in the flow's thread by default, fanned
out on the flow's task runner with ``orchestration.max_workers`` > 1 or Dask), and the evaluation is
`tasks.rollout_task`. Records go to the archive and the MLflow lineage (a child run per leg).

Replay: when the archive already holds this iteration's leg as done with the same inputs (a resumed run), the tasks
run again — and come back ``Cached`` — but nothing is written twice. A rerun (``refresh``) recomputes the tasks.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow

from flows.common import IterState, ReplayArchive, ResumingArchive, RunHandles
from tasks import grpo_update, plateau_check, propose_harness, rollout_task, score_harness
from whale_core.legs.budget import Budget
from whale_core.legs.harness_leg import run_harness_leg
from whale_core.legs.schedule import Decision, LegOutcome
from whale_core.legs.scoring import ScoreBlock
from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable, check_candidate
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

    def __init__(self, search: dict[str, Any], seed: int, incumbent: Any, restrict_to: Any, opts: dict[str, Any]):
        self.name = str(search.get("proposer", "mutate"))
        self.search, self.seed, self.incumbent, self.restrict_to, self.opts = search, seed, incumbent, restrict_to, opts

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


@flow(name="block-ascent-iteration", flow_run_name="{run_id}/iteration-{iteration}", persist_result=True)
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
    suite_cfg = cfg.suite.model_dump(mode="json")
    decision = plateau_check.with_options(**opts)(history, cfg.mode, cfg.schedule.model_dump(mode="json"), iteration)
    kind = decision.leg
    done = None if refresh else _matching_done_leg(h, iteration, kind, state)
    archive: Any = ReplayArchive(h.archive) if done is not None else ResumingArchive(h.archive)
    earlier = [leg for leg in h.archive.legs(run_id) if leg.iteration == iteration and leg.kind == kind]
    for stale in earlier:  # kept as history, marked, and left out of the report's tables
        if stale.status == "running":  # its process died (a resumed run): this attempt takes over
            h.archive.end_attempt(stale.id, "interrupted", "its process ended before the leg finished")
        elif refresh and stale.status == "done":
            h.archive.end_attempt(stale.id, "superseded", f"recomputed by whale rerun (generation {generation})")
    as_of = min((leg.started for leg in earlier), default=None)
    archive.add_decision(
        run_id, iteration, "switch" if decision.switched else "continue", decision.reason, {"leg": kind}
    )
    leg = archive.start_leg(
        run_id, iteration, kind, incumbent_harness_in=state.harness.sha, checkpoint_in=state.policy.checkpoint_id
    )
    child = h.lineage.ensure_leg(
        h.mlflow_parent, run_id, iteration, kind, existing_mlflow_run_id=done.mlflow_run_id if done else None
    )
    if done is None:
        h.archive.set_leg_mlflow_run(leg.id, child)
    spent_before = bud.spent
    try:
        if kind == "weights":
            population = _population(h, cfg, state, as_of or leg.started)
            policy, harness, accepted = _weights_leg(
                h, cfg, iteration, state, base, bud, suite_cfg, opts, child, generation, population,
                replay=done is not None,
            )  # fmt: skip
        else:
            policy, harness, accepted = _harness_leg(
                h, cfg, iteration, state, bud, suite_cfg, opts, child, archive, leg.id, as_of
            )
        if (policy, harness) == (state.policy, state.harness):
            metric, eval_completions = state.metric, 0
        else:
            ev = rollout_task.with_options(**opts)(
                policy,
                harness,
                suite_cfg,
                "val",
                cfg.rollout.val_problems,
                cfg.seed,
                cfg.rollout.batch_size,
                str(h.run_dir / "traces"),
            )
            metric, eval_completions = ev.score, ev.completions
            bud.charge(kind, min(eval_completions, bud.remaining(kind)))
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
        "accepted": float(bool(accepted)) if kind == "harness" else -1.0,
    }
    if done is None:
        archive.finish_leg(
            leg.id,
            budget_used=used,
            incumbent_harness_out=harness.sha,
            checkpoint_out=policy.checkpoint_id,
            metrics=metrics,
        )
        h.lineage.log_metrics(child, metrics, step=iteration)
        h.lineage.log_metrics(
            h.mlflow_parent, {"val_score": metric, "rollouts": float(state.rollouts + used)}, step=iteration
        )
    h.lineage.end(child)
    outcome = LegOutcome(iteration, kind, metric, accepted if kind == "harness" else None, state.metric)
    new_state = IterState(policy, harness, metric, state.rollouts + used)
    return IterationResult(new_state, outcome, decision, bud.to_dict(), used, done is not None)


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
    bud: Budget,
    suite_cfg: dict[str, Any],
    opts: dict[str, Any],
    child: str,
    generation: int,
    population: list[HarnessRef],
    replay: bool,
) -> tuple[PolicyRef, HarnessRef, bool]:
    reserve = cfg.rollout.val_problems
    cap = bud.remaining("weights") - reserve
    if cap <= 0:
        return state.policy, state.harness, False
    out_dir = h.run_dir / f"iter-{iteration:02d}-weights" / f"gen-{generation}"
    out = grpo_update.with_options(**opts)(
        state.policy,
        base,
        state.harness,
        suite_cfg,
        cfg.weights.model_dump(mode="json"),
        cfg.seed,
        iteration,
        generation,
        cap,
        str(out_dir),
        population,
    )
    bud.charge("weights", min(out.completions, bud.remaining("weights")))
    ckpt = out.checkpoint
    if not replay:
        h.archive.put_checkpoint(
            ckpt["id"], h.run_id, ckpt["path"], ckpt["harness_sha"], parent_id=ckpt["parent_id"], step=ckpt["step"]
        )
        h.lineage.log_harness(
            child,
            state.harness.sha,
            state.harness.text,
            name=state.harness.load().name,
            parent_sha=state.harness.parent,
            status="trained-against",
            score=state.metric,
        )
        model_id = h.lineage.log_checkpoint(
            child,
            Path(ckpt["path"]),
            checkpoint_id=ckpt["id"],
            harness_sha=ckpt["harness_sha"],
            parent_checkpoint_id=ckpt["parent_id"],
            step=ckpt["step"],
        )
        h.archive.put_checkpoint(ckpt["id"], h.run_id, ckpt["path"], ckpt["harness_sha"], mlflow_model_id=model_id)
        h.lineage.log_metric_history(
            child,
            [
                (
                    s["step"],
                    {
                        "reward": s["reward_mean"],
                        "reward_std": s["reward_std"],
                        "frac_zero_std": s["frac_zero_std_groups"],
                    },
                )
                for s in out.steps
            ],
        )
    return out.policy, state.harness, False


def _harness_leg(
    h: RunHandles,
    cfg: Any,
    iteration: int,
    state: IterState,
    bud: Budget,
    suite_cfg: dict[str, Any],
    opts: dict[str, Any],
    child: str,
    archive: Any,
    leg_id: int,
    as_of: Any,
) -> tuple[PolicyRef, HarnessRef, bool]:
    from tasks.runtime import suite_of

    incumbent = state.harness.load()
    restrict = frozenset({"instruction"}) if cfg.mode == "prompt-weights" else None
    search = cfg.search.model_dump(mode="json")

    score = score_harness.with_options(**opts)

    def roll_many(jobs: list[tuple[Any, int, int]]) -> list[ScoreBlock]:
        seed, batch = cfg.seed, cfg.rollout.batch_size
        args = [(state.policy, HarnessRef.of(hh), suite_cfg, i, j, seed, batch) for hh, i, j in jobs]
        if cfg.orchestration.inline:  # one worker: in this thread (see OrchestrationConfig for why)
            return [score(*a) for a in args]
        futures = [score.submit(*a) for a in args]
        return [f.result() for f in futures]

    res = run_harness_leg(
        policy=None,
        policy_id=state.policy.checkpoint_id,
        incumbent=incumbent,
        suite=suite_of(suite_cfg),
        cfg=cfg.search,
        archive=archive,
        run_id=h.run_id,
        leg_id=leg_id,
        iteration=iteration,
        seed=cfg.seed,
        traces_dir=h.run_dir / "traces",
        batch_size=cfg.rollout.batch_size,
        budget=bud,
        restrict_to=restrict,
        proposer=_TaskProposer(search, cfg.seed + iteration, incumbent, restrict, opts),
        roll_many=roll_many,
        as_of=as_of,
    )
    if not isinstance(archive, ReplayArchive):
        scores = {c.sha: c.score for c in res.candidates if c.sha}
        h.lineage.log_harness(
            child,
            incumbent.sha,
            incumbent.text,
            name=incumbent.name,
            parent_sha=incumbent.parent,
            status="incumbent",
            score=res.incumbent_score,
        )
        for cand in h.archive.candidates(h.run_id, leg_id=leg_id):
            text = cand.text
            if text is None and cand.harness_sha:
                found = h.archive.find_harness(cand.harness_sha)
                text = found.text if found else None
            if not text:
                continue
            sha = cand.harness_sha or hashlib.sha256(text.encode()).hexdigest()
            h.lineage.log_harness(
                child,
                sha,
                text,
                name=sha[:12],
                parent_sha=cand.parent_sha,
                status=cand.status,
                score=scores.get(sha),
                reason=cand.reason,
            )
        h.lineage.log_metrics(
            child,
            {
                "candidates": float(sum(c.status != "incumbent" for c in res.candidates)),
                "rejected": float(sum(c.status == "rejected" for c in res.candidates)),
                "winner_score": float(res.winner_score if res.winner_score is not None else -1.0),
                "incumbent_score": float(res.incumbent_score),
            },
            step=iteration,
        )
    new = HarnessRef.of(res.incumbent_out) if res.accepted else state.harness
    return state.policy, new, res.accepted
