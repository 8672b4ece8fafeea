"""What a run shows in the Prefect UI besides its states: flow-run names and tags, artifacts, links to MLflow.

Flow runs, not task runs, carry the tags (run id, mode, leg): set through the client on the running flow run, so
its tasks do not inherit them (see flows/whale_run.py on why task runs have no tags). The iteration subflow is named
like the leg's MLflow run (``RUN_ID/iter-01-weights``) once its plateau check has chosen the leg. Artifacts: each
harness leg's leaderboard (a table), the run's report (markdown), and links both ways between the flow run and its
MLflow run. Every function here is best effort: the UI's labels never fail a run (a failure is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("whale.flows")

PREFECT_UI = "http://127.0.0.1:4200"  # as `whale ui --prefect` serves the home's Prefect database (default port)


def flow_run_id() -> str | None:
    """The running flow run's id (None outside a flow run)."""
    from prefect.runtime import flow_run

    rid = flow_run.get_id()
    return str(rid) if rid else None


def flow_run_url(run_id: str | None = None) -> str | None:
    """The flow run's page as `whale ui --prefect` serves it (the temporary server's URL dies with the run; its
    database, under the home's PREFECT_HOME, keeps the flow run)."""
    rid = run_id or flow_run_id()
    return f"{PREFECT_UI}/runs/flow-run/{rid}" if rid else None


def label_flow_run(name: str | None, tags: Iterable[str]) -> None:
    """Rename the running flow run and add ``tags`` to its own (tasks started afterwards do not inherit them)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    fr = ctx.flow_run
    new_tags = sorted({*fr.tags, *tags})
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(UUID(str(fr.id)), name=name, tags=new_tags)
    except Exception as exc:  # a label is not worth a failed run
        log.warning("could not label flow run %s: %s", fr.id, exc)


def leaderboard_artifact(archive: Any, run_id: str, leg_id: int, iteration: int, checkpoint_id: str) -> None:
    """A table artifact ``leaderboard-iter-NN`` of the harness leg's candidates, best first: sha12, status, val
    score (largest n), n, prompt tokens per problem, reason."""
    from prefect.artifacts import create_table_artifact

    best: dict[str, Any] = {}
    for ev in archive.evaluations(run_id, checkpoint_id=checkpoint_id, split="val"):
        if ev.harness_sha not in best or ev.n >= best[ev.harness_sha].n:
            best[ev.harness_sha] = ev
    rows = []
    for c in archive.candidates(run_id, leg_id=leg_id):
        ev = best.get(c.harness_sha or "")
        rows.append({
            "sha12": (c.harness_sha or "")[:12] or "-",
            "status": c.status,
            "val_score": round(ev.score, 4) if ev else None,
            "n": ev.n if ev else None,
            "prompt_tokens": round(ev.prompt_tokens / ev.n, 1) if ev and ev.n else c.prompt_tokens_per_problem,
            "reason": c.reason or "",
        })  # fmt: skip
    rows.sort(key=lambda r: (r["val_score"] is None, -(r["val_score"] or 0.0)))
    _safely(create_table_artifact, rows, key=f"leaderboard-iter-{iteration:02d}",
            description=f"harness leg of iteration {iteration}: every candidate, best val score first")  # fmt: skip


def report_artifacts(report_md: Path, mlflow_url: str | None) -> None:
    """The run's report as a markdown artifact and a link artifact to its MLflow run, on the running flow run."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    _safely(create_markdown_artifact, report_md.read_text(), key="whale-report", description="the run's report.md")
    if mlflow_url:
        _safely(create_link_artifact, mlflow_url, link_text="MLflow run (`whale ui`)", key="mlflow-run")


def _safely(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # an artifact is not worth a failed run
        log.warning("Prefect artifact %s not created: %s", kwargs.get("key"), exc)
