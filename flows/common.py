"""What WHALE's flows share: the task runner candidate scoring fans out on, and where heartbeats go.

`task_runner` builds the iteration subflow's task runner from ``orchestration`` (Prefect's thread pool, or a Dask
cluster through prefect-dask); `heartbeats` decides which flow runs send Prefect's crash-detection heartbeats.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from whale_core.config import WhaleConfig


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
