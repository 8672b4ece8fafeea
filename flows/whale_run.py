"""``whale-run``: a whole WHALE run — initial evaluation, block-ascent iterations until the budget, the iteration
cap or a no-progress stop ends them, one final test evaluation of the initial and the final (model, harness), and a
report.

Entry points used by the CLI: `start_run` (new run), `resume_run` (same run id and config: completed tasks come
back ``Cached``, the archive and MLflow records are re-attached, not duplicated), `rerun_iteration` (recompute one
iteration's leg and whatever depends on it). Each call is one Prefect flow run of `whale_run`.

Labels in the Prefect UI (see flows/prefect_ui.py): the run's flow run is named for the WHALE run id, each
iteration's subflow like its leg's MLflow run (``RUN_ID/iter-01-weights``), tasks for what they do and where
(``grpo-update-iter1``, ``score-harness-<sha12>-r<round>``, ...), and the run's own evaluations ``rollout-init``,
``rollout-test-initial`` and ``rollout-test-final``. Tags (run id, mode, leg) go on flow runs only, set on the running
flow run through the client so that its tasks do not inherit them: WHALE puts no tags on task runs because Prefect
turns every task-run tag into a tag-concurrency request to its server before the task may start (one round trip per
task, measured at 0.04–2 s on 2 cores). A user's own ``with tags("gpu"):`` around a run still applies, concurrency
limits included.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from prefect import flow

from flows import prefect_ui, sqlite_retry
from flows.common import IterState, RunHandles, heartbeats
from flows.iteration import block_ascent_iteration, run_splits
from flows.startup import prepare
from tasks import rollout_task
from whale_core.config import WhaleConfig, upgrade_stored
from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.legs.schedule import LegOutcome, mode_legs, no_progress
from whale_core.records.recorder import Recorder
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.science.outputs import write_outputs
from whale_core.science.report import TestScores, write_report


def task_runner(cfg: WhaleConfig) -> Any:
    """The task runner candidate scoring fans out on (see `OrchestrationConfig`)."""
    orch = cfg.orchestration
    if orch.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as exc:
            raise RuntimeError("orchestration.task_runner=dask needs prefect-dask: pip install -e '.[dask]'") from exc
        if orch.dask_address:
            return DaskTaskRunner(address=orch.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": orch.max_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            }
        )
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=orch.max_workers)


def seed_harness(cfg: WhaleConfig) -> Harness:
    """The run's starting harness: ``cfg.harness`` (a file) or the suite's seed harness."""
    from tasks.runtime import suite_of

    if cfg.harness:
        return Harness.from_file(cfg.harness)
    return Harness.from_text(suite_of(cfg.suite.model_dump(mode="json")).seed_harness)


@flow(name="whale-run", flow_run_name="{run_id}", persist_result=True, validate_parameters=False)
def whale_run(
    run_id: str, config: dict[str, Any], rerun_from: int | None = None, generation: int = 0
) -> dict[str, Any]:
    sqlite_retry.install()  # also where a worker runs this flow without `prepare` (deployments)
    cfg = WhaleConfig.model_validate(config)
    h = RunHandles.open(run_id, cfg)
    h.archive.update_run(run_id, status="running")
    prefect_ui.label_flow_run(None, [run_id, cfg.mode])  # the flow run's own tags: its tasks do not inherit them
    prefect_url = prefect_ui.flow_run_url()
    if prefect_url:  # the link from MLflow to the flow run (as `whale ui --prefect` serves it)
        h.lineage.client.set_tag(h.mlflow_parent, "whale.prefect_flow_run", prefect_url)
    base = PolicyRef.base(cfg.model.name, cfg.model.device)
    h0 = HarnessRef.of(seed_harness(cfg))
    bud = Budget.from_config(cfg.budget)
    try:
        ev0 = rollout_task.with_options(task_run_name="rollout-init")(
            base, h0, cfg.suite.model_dump(mode="json"), "val", cfg.rollout.val_problems, cfg.seed,
            cfg.rollout.batch_size, str(h.run_dir / "traces"),
        )  # fmt: skip
        bud.charge("eval", ev0.completions)
        _recorder(h).run_start(ev0.score, ev0.completions)
        state, bud, history = _iterate(h, config, IterState(base, h0, ev0.score, 0), base, bud, rerun_from, generation)
        summary = _finish(h, base, h0, ev0.score, state, bud, history)
        prefect_ui.report_artifacts(Path(summary["report"]), summary.get("mlflow_url"))
        summary["prefect_url"] = prefect_url
        h.archive.update_run(run_id, status="finished")
        h.lineage.end(h.mlflow_parent)
        return summary
    except BaseException:
        h.archive.update_run(run_id, status="failed")
        raise


def _iterate(
    h: RunHandles,
    config: dict[str, Any],
    state: IterState,
    base: PolicyRef,
    bud: Budget,
    rerun_from: int | None,
    generation: int,
) -> tuple[IterState, Budget, list[LegOutcome]]:
    """Block-ascent iterations (one subflow each) until the iteration cap (``iterations``; none when null), a spent
    budget, or no progress in ``schedule.stop_patience`` legs (`no_progress`), each stop recorded as a ``stop``
    decision; returns the pair reached, the budget left and each iteration's outcome."""
    cfg, run_id = h.cfg, h.run_id
    history: list[LegOutcome] = []
    initial = state.metric
    legs = mode_legs(cfg.mode)
    for i in range(cfg.max_legs):
        if not any(bud.remaining(k) >= cfg.min_completions(k) for k in legs):
            h.archive.ensure_decision(run_id, i, "stop", "rollout budget spent", {"budget": bud.to_dict()})
            break
        with heartbeats():
            res = block_ascent_iteration.with_options(task_runner=task_runner(cfg))(
                run_id,
                config,
                i,
                state,
                base,
                history,
                bud.to_dict(),
                refresh=rerun_from == i,
                generation=generation if rerun_from == i else 0,
            )
        bud = Budget.from_dict(res.budget)
        state = res.state
        history.append(res.outcome)
        if res.completions == 0 and not res.replayed and bud.remaining(res.outcome.leg) <= 0:
            h.archive.ensure_decision(run_id, i, "stop", f"{res.outcome.leg} budget spent", {"budget": bud.to_dict()})
            break
        patience = cfg.schedule.stop_patience
        why = patience and no_progress(history, cfg.mode, patience, cfg.schedule.min_delta, initial)
        if why:
            h.archive.ensure_decision(run_id, i + 1, "stop", why, {"budget": bud.to_dict()})
            break
    return state, bud, history


def _finish(
    h: RunHandles,
    base: PolicyRef,
    h0: HarnessRef,
    val_initial: float,
    state: IterState,
    bud: Budget,
    history: list[LegOutcome],
) -> dict[str, Any]:
    """The run's end: the initial and the final pair on the test split, the ready outputs (``final_harness.yaml``,
    the final adapter, the reproduce line), the report (recorded with the final harness and the test scores) and
    ``summary.json``; returns the summary."""
    cfg, run_id = h.cfg, h.run_id
    suite_cfg, traces = cfg.suite.model_dump(mode="json"), str(h.run_dir / "traces")
    t0 = rollout_task.with_options(task_run_name="rollout-test-initial")(
        base, h0, suite_cfg, "test", cfg.rollout.test_problems, cfg.seed, cfg.rollout.batch_size, traces
    )
    t1 = rollout_task.with_options(task_run_name="rollout-test-final")(
        state.policy,
        state.harness,
        suite_cfg,
        "test",
        cfg.rollout.test_problems,
        cfg.seed,
        cfg.rollout.batch_size,
        traces,
    )
    bud.charge("eval", t0.completions + t1.completions)
    test = TestScores(initial=t0.score, final=t1.score, n=t1.n)
    outputs = write_outputs(h.run_dir, cfg, state.policy, state.harness)
    md, png = write_report(
        h.archive,
        run_id,
        h.run_dir,
        initial_metric=val_initial,
        test=test,
        seed_harness=h0.load(),
        final_harness=state.harness.load(),
        final_checkpoint=state.policy.checkpoint_id,
        budget=bud.to_dict(),
        outputs=outputs,
    )
    _recorder(h).run_end(
        md, png, state.harness, state.metric, {"test_score_initial": test.initial, "budget_spent": float(bud.spent)},
        test_score=test.final, final_checkpoint=state.policy.checkpoint_id,
    )  # fmt: skip
    summary = {
        "run_id": run_id,
        "mode": cfg.mode,
        "test_initial": test.initial,
        "test_final": test.final,
        "test_n": test.n,
        "val_initial": val_initial,
        "val_final": state.metric,
        "report": str(md),
        "final_harness": state.harness.sha,
        "final_checkpoint": state.policy.checkpoint_id,
        "budget": bud.to_dict(),
        "iterations": len(history),
        "legs": [o.leg for o in history],
        "mlflow_run_id": h.mlflow_parent,
        "mlflow_url": h.lineage.run_url(h.mlflow_parent),  # as `whale ui` serves it (default port)
        "final_harness_file": str(outputs.harness_file),
        "final_adapter": outputs.adapter,
        "reproduce": outputs.reproduce,
    }
    (h.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _recorder(h: RunHandles) -> Recorder:
    """The recorder of the run's own records (its MLflow parent run), with the suite splits its scores are on."""
    return Recorder(h.archive, h.lineage, run_id=h.run_id, mlflow_parent=h.mlflow_parent, splits=run_splits(h.cfg))


def _top_level_run(run_id: str, config: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """One flow run of `whale_run` as the process's top-level run (heartbeats only where a server watches them)."""
    with heartbeats(top_level=True):
        return whale_run(run_id, config, **kwargs)  # type: ignore[no-any-return]


def new_run_id(cfg: WhaleConfig) -> str:
    return f"{cfg.mode}-s{cfg.seed}-{uuid.uuid4().hex[:8]}"


def start_run(cfg: WhaleConfig, run_id: str | None = None) -> dict[str, Any]:
    """A new run (the archive record is created before the flow starts, so ``whale resume`` can find it).

    Raises `ArchiveError` if the archive already holds a run ``run_id`` (resume it instead)."""
    from whale_core.records.archive import Archive, ArchiveError, RecordNotFound

    rid = run_id or new_run_id(cfg)
    archive = Archive(cfg.tracking.archive_url)
    try:
        archive.get_run(rid)
    except RecordNotFound:
        archive.create_run(rid, cfg.mode, cfg.model_dump(mode="json"), run_id=rid)
    else:
        raise ArchiveError(
            f"run {rid!r} already exists in {archive.safe_url}: continue it with `whale resume {rid}`, "
            "or start a new one with another --run-id"
        )
    prepare(cfg)
    return _top_level_run(rid, cfg.model_dump(mode="json"))


def resume_run(run_id: str, archive_url: str | None = None) -> dict[str, Any]:
    """Continue a stopped or crashed run with its stored config; completed tasks come back ``Cached``."""
    from whale_core.records.archive import Archive

    stored = Archive(archive_url).get_run(run_id)
    # A finished run resumed is a fully cached re-run: nothing heavy to preload (see flows/startup.py).
    config = upgrade_stored(stored.config)
    prepare(WhaleConfig.model_validate(config), compute=stored.status != "finished")
    return _top_level_run(run_id, config)


def rerun_iteration(run_id: str, iteration: int, archive_url: str | None = None) -> dict[str, Any]:
    """Recompute iteration ``iteration``'s leg (its tasks refresh their cache) and whatever depends on it.

    Raises `ArchiveError` for an unknown run and for an iteration the run has no leg of (nothing is recorded then)."""
    from whale_core.records.archive import Archive, ArchiveError

    archive = Archive(archive_url)
    config = upgrade_stored(archive.get_run(run_id).config)
    ran = sorted({leg.iteration for leg in archive.legs(run_id)})
    if iteration not in ran:
        which = f"iterations {', '.join(map(str, ran))}" if ran else "no iteration yet"
        raise ArchiveError(
            f"run {run_id!r} has {which}: --iteration {iteration} is not one of them "
            f"(a run that has not reached it continues with `whale resume {run_id}`)"
        )
    generation = 1 + sum(1 for d in archive.decisions(run_id) if d.kind == "rerun" and d.iteration == iteration)
    archive.add_decision(
        run_id, iteration, "rerun", f"rerun of iteration {iteration} requested", {"generation": generation}
    )
    prepare(WhaleConfig.model_validate(config))
    return _top_level_run(run_id, config, rerun_from=iteration, generation=generation)
