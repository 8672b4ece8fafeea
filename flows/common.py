"""What a WHALE flow carries between iterations, and the handles it opens once per run.

`IterState` is the (policy, incumbent harness, metric) pair an iteration starts from; `RunHandles` opens the archive
(the source of truth), the MLflow lineage and the run directory. A resumed run re-executes an iteration the archive
already holds as *done* on `Archive.read_only_view` — its tasks come back ``Cached`` — without writing its records
twice, and re-takes an iteration a killed run had started without storing its decisions twice (both are modes of
`whale_core.records.recorder.Recorder`).
`heartbeats` decides which flow runs send Prefect's crash-detection heartbeats.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from whale_core.config import WhaleConfig, flatten
from whale_core.env import whale_home
from whale_core.records.archive import Archive
from whale_core.records.lineage import Lineage
from whale_core.records.refs import HarnessRef, PolicyRef


@dataclass(frozen=True)
class IterState:
    policy: PolicyRef
    harness: HarnessRef
    metric: float
    rollouts: int  # completions spent so far (x axis of the curve)


@dataclass
class RunHandles:
    run_id: str
    cfg: WhaleConfig
    archive: Archive
    lineage: Lineage
    run_dir: Path
    mlflow_parent: str

    @classmethod
    def open(cls, run_id: str, cfg: WhaleConfig) -> RunHandles:
        archive = Archive(cfg.tracking.archive_url)
        try:
            run = archive.get_run(run_id)
        except LookupError:
            run = archive.create_run(run_id, cfg.mode, cfg.model_dump(mode="json"), run_id=run_id)
        lineage = Lineage(cfg.tracking.mlflow_uri, cfg.tracking.experiment)
        parent = lineage.ensure_run(
            run_id,
            run_id,
            flatten(cfg.model_dump(mode="json")),
            tags={"whale.mode": cfg.mode, "whale.suite": cfg.suite.name, "whale.model": cfg.model.name},
            existing_mlflow_run_id=run.mlflow_run_id,
        )
        if run.mlflow_run_id != parent:
            archive.update_run(run_id, mlflow_run_id=parent)
        run_dir = whale_home() / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        return cls(run_id, cfg, archive, lineage, run_dir, parent)


def heartbeats(top_level: bool = False) -> AbstractContextManager[object]:
    """Where flow runs started inside should send Prefect's heartbeats (crash detection), and where not.

    A flow run's heartbeat thread sleeps in 1-s steps and is joined when the run ends, so every flow run costs up to
    ~1 s more (measured: a trivial subflow 1.10–1.16 s with heartbeats, 0.11 s without; a WHALE run has one subflow
    per iteration). Kept only where someone can use them: the top-level flow run of a process (``top_level``) that
    reports to a persistent Prefect server. Off for subflows (their parent's heartbeat covers the same process) and
    for runs on Prefect's temporary server (it ends with the process; nothing watches it).
    """
    from prefect.context import FlowRunContext
    from prefect.settings import temporary_settings

    from flows.startup import uses_temporary_server

    if top_level and FlowRunContext.get() is None and not uses_temporary_server():
        return nullcontext()
    return temporary_settings(updates={"flows.heartbeat_frequency": None})
