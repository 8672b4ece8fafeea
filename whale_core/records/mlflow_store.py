"""Where the lineage's MLflow store lives and how a new one starts: ``sqlite:///$WHALE_HOME/mlflow.db`` with
artifacts in ``mlartifacts/`` beside it, a new SQLite store seeded from the machine's migrated template
(`whale_core.records.db_templates`). Used by `whale_core.records.lineage.Lineage`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whale_core.env import sqlite_path, sqlite_url, whale_home


def seed_store(tracking_uri: str) -> Path | None:
    """A new SQLite store starts as a copy of the machine's migrated template (see `whale_core.records.db_templates`).

    Returns the store's path when it is new and no template exists (the caller saves it as the template once MLflow
    has migrated it), else None. Called before MLflow opens the store (opening creates the file).
    """
    path = sqlite_path(tracking_uri)
    if path is None or path.exists():
        return None
    import mlflow

    from whale_core.records import db_templates

    return None if db_templates.seed(path, "mlflow", mlflow.__version__) else path


def save_template(path: Path, client: Any) -> None:
    """Save a new store, migrated and before anything of a run is written, as the machine's template.

    MLflow's default experiment (id 0) records an absolute artifact path, so the template leaves it out and MLflow
    creates it on open with each store's own path.
    """
    import mlflow

    from whale_core.records import db_templates

    client.get_experiment("0")  # the store's first use: MLflow migrates the new file and adds experiment 0
    db_templates.save(
        path,
        "mlflow",
        mlflow.__version__,
        allowed={"alembic_version", "workspaces"},
        scrub=lambda con: con.execute("DELETE FROM experiments WHERE experiment_id = 0"),
    )


def default_uri() -> str:
    return sqlite_url(whale_home() / "mlflow.db")


def default_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts of a local SQLite store live next to it (``mlartifacts/``); a DB store without a server gets
    ``$WHALE_HOME/mlartifacts``; a tracking server decides for itself (None)."""
    if tracking_uri.startswith(("http://", "https://", "databricks")):
        return None
    store = sqlite_path(tracking_uri)
    if store is not None:
        return (store.parent / "mlartifacts").as_uri()
    return (whale_home() / "mlartifacts").as_uri()
