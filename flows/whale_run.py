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

import uuid
from pathlib import Path
from typing import Any

from prefect import flow

from flows import prefect_ui, sqlite_retry
from flows.calls import PrefectCalls
from flows.common import heartbeats
from flows.startup import prepare
from tasks.runtime import suite_of
from whale_core.ascent.conclude import conclude
from whale_core.ascent.setup import engine_for, run_recorder
from whale_core.config import WhaleConfig, upgrade_stored
from whale_core.env import whale_home
from whale_core.errors import WhaleError
from whale_core.process import exclusive
from whale_core.records.recorder import Recorder
from whale_core.records.run_ids import check_run_id


class RunBusyError(WhaleError, RuntimeError):
    """Another process drives this run (``whale run``/``resume``/``rerun`` at once on one run)."""


@flow(name="whale-run", flow_run_name="{run_id}", persist_result=True, validate_parameters=False)
def whale_run(run_id: str, config: WhaleConfig, rerun_from: int | None = None, generation: int = 0) -> dict[str, Any]:
    """One WHALE run: the engine's block ascent (`whale_core.ascent.engine.BlockAscent`) with its calls as Prefect
    tasks, then its conclusion (final test, outputs, report)."""
    sqlite_retry.install()  # also where a worker runs this flow without `prepare` (deployments)
    run_dir = whale_home() / "runs" / check_run_id(run_id)
    with exclusive(run_dir / ".lock", f"run {run_id!r}", RunBusyError):  # a second driver stops here, before any record
        return _drive(run_id, config, run_dir, rerun_from, generation)


def _drive(run_id: str, cfg: WhaleConfig, run_dir: Path, rerun_from: int | None, generation: int) -> dict[str, Any]:
    rec = run_recorder(cfg, run_id)
    rec.run_status("running")
    prefect_ui.label_flow_run(None, [run_id, cfg.mode])  # the flow run's own tags: its tasks do not inherit them
    prefect_url = prefect_ui.flow_run_url()
    rec.link_run(prefect_url)  # the link from MLflow to the flow run (as `whale ui --prefect` serves it)
    try:
        calls = PrefectCalls(cfg, run_id, run_dir, rec.store)
        engine = engine_for(cfg, calls, rec, run_dir, suite=suite_of(cfg.suite), rerun_from=rerun_from,
                            generation=generation)  # fmt: skip
        summary = conclude(engine, engine.run())
        prefect_ui.report_artifacts(Path(summary["report"]), summary.get("mlflow_url"))
        summary["prefect_url"] = prefect_url
        rec.run_status("finished")
        rec.end_run()
        return summary
    except BaseException:
        rec.run_status("failed")
        raise


def _top_level_run(run_id: str, config: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """One flow run of `whale_run` as the process's top-level run (heartbeats only where a server watches them)."""
    with heartbeats(top_level=True):
        return whale_run(run_id, WhaleConfig.model_validate(config), **kwargs)  # type: ignore[no-any-return]


def new_run_id(cfg: WhaleConfig) -> str:
    return f"{cfg.mode}-s{cfg.seed}-{uuid.uuid4().hex[:8]}"


def start_run(cfg: WhaleConfig, run_id: str | None = None) -> dict[str, Any]:
    """A new run (the archive record is created before the flow starts, so ``whale resume`` can find it).

    Raises `ArchiveError` if the archive already holds a run ``run_id`` (resume it instead)."""
    from whale_core.records.archive import Archive, ArchiveError
    from whale_core.records.recorder import create_run

    rid = check_run_id(run_id) if run_id is not None else new_run_id(cfg)
    archive = Archive(cfg.tracking.archive_url)
    if not create_run(archive, rid, cfg.mode, cfg.model_dump(mode="json")):
        raise ArchiveError(
            f"run {rid!r} already exists in {archive.safe_url}: continue it with `whale resume {rid}`, "
            "or start a new one with another --run-id"
        )
    prepare(cfg)
    return _top_level_run(rid, cfg.model_dump(mode="json"))


def resume_run(run_id: str, archive_url: str | None = None) -> dict[str, Any]:
    """Continue a stopped or crashed run with its stored config; completed tasks come back ``Cached``."""
    from whale_core.records.archive import Archive

    stored = Archive(archive_url).get_run(check_run_id(run_id))
    # A finished run resumed is a fully cached re-run: nothing heavy to preload (see flows/startup.py).
    config = upgrade_stored(stored.config)
    prepare(WhaleConfig.model_validate(config), compute=stored.status != "finished")
    return _top_level_run(run_id, config)


def rerun_iteration(run_id: str, iteration: int, archive_url: str | None = None) -> dict[str, Any]:
    """Recompute iteration ``iteration``'s leg (its tasks refresh their cache) and whatever depends on it.

    Raises `ArchiveError` for an unknown run and for an iteration the run has no leg of (nothing is recorded then)."""
    from whale_core.records.archive import Archive, ArchiveError

    archive = Archive(archive_url)
    config = upgrade_stored(archive.get_run(check_run_id(run_id)).config)
    ran = sorted({leg.iteration for leg in archive.legs(run_id)})
    if iteration not in ran:
        which = f"iterations {', '.join(map(str, ran))}" if ran else "no iteration yet"
        raise ArchiveError(
            f"run {run_id!r} has {which}: --iteration {iteration} is not one of them "
            f"(a run that has not reached it continues with `whale resume {run_id}`)"
        )
    with exclusive(whale_home() / "runs" / run_id / ".lock", f"run {run_id!r}", RunBusyError):
        pass  # another process drives the run: refuse before recording the rerun (the flow takes the lock itself)
    generation = 1 + sum(1 for d in archive.decisions(run_id) if d.kind == "rerun" and d.iteration == iteration)
    Recorder(archive, run_id=run_id).decide(
        iteration, "rerun", f"rerun of iteration {iteration} requested", {"generation": generation}
    )
    prepare(WhaleConfig.model_validate(config))
    return _top_level_run(run_id, config, rerun_from=iteration, generation=generation)
