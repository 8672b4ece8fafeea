"""A portable home: what a run stores about files under ``$WHALE_HOME`` still finds them after the home is copied or
moved.

Two mechanisms, one per kind of store:

- **WHALE's own records** (the archive's checkpoint paths and trace files, a `PolicyRef`'s adapter) store a path
  under the home *relative to the home* (`to_home`) and resolve it against the current home when read
  (`from_home`). A path outside the home (a user's model dir, a home-less test) stays absolute, and rows written
  absolute before this existed stay readable as they are.
- **MLflow's SQLite store** records absolute artifact locations (``experiments.artifact_location``,
  ``runs.artifact_uri``, ``logged_models.artifact_location``, model versions' ``source``/``storage_location``, a
  trace's artifact-location tag). `relocate_mlflow_store` rewrites them from the old home's ``mlartifacts/`` to this
  home's when the two differ, in one transaction; it is a no-op for a home that was not moved (so calling it on
  every open costs one indexed read) and for any store that is not a local SQLite file.

Why rewrite on open instead of storing relative locations in MLflow: the MLflow client that WHALE uses in-process
(no server) resolves a run's ``artifact_uri`` itself and needs an absolute ``file://`` URI — it refuses or
misplaces relative ones; the alternative, ``mlflow-artifacts:`` URIs, is resolved only by a running tracking server
(``--artifacts-destination``), which a run would then need just to log a file. Rewriting the few location columns
when a moved store is opened keeps both the in-process client and ``mlflow server``/``whale ui`` working.

Prefect needs nothing: a task's cached result is looked up by its cache key under ``$PREFECT_HOME/storage``, which
WHALE derives from the current home (`whale_core.env.setup_offline_env`); the absolute ``storage_key`` in old state
rows of ``prefect.db`` is only read when an old flow run's own result is fetched, which resume never does.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

from whale_core.env import sqlite_path, sqlite_url

__all__ = ["MLFLOW_LOCATION_COLUMNS", "current_home", "from_home", "relocate_mlflow_store", "to_home"]


def current_home() -> Path:
    """``$WHALE_HOME`` (default ``./.whale``), resolved; unlike `whale_core.env.whale_home` it creates nothing."""
    return Path(os.environ.get("WHALE_HOME", ".whale")).expanduser().resolve()


def to_home(path: str | Path, home: Path | None = None) -> str:
    """``path`` relative to the home (POSIX separators) when it lies under it, else ``path`` unchanged."""
    root = (home or current_home()).resolve()
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    try:
        return p.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def from_home(path: str | Path, home: Path | None = None) -> str:
    """The absolute path of a stored path: a relative one is under the current home; an absolute one as stored."""
    p = Path(path)
    if p.is_absolute():
        return str(path)
    return str((home or current_home()).resolve() / p)


# (table, column) of an MLflow SQLite store that hold an artifact location. A pair the store's schema lacks (an
# older or newer MLflow) is skipped. ``trace_tags.value``: a trace's ``mlflow.artifactLocation`` tag.
MLFLOW_LOCATION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("trace_tags", "value"),
)


def _plain(uri: str) -> str:
    """The file-system path of a ``file://`` URI."""
    return unquote(urlparse(uri).path)


def relocate_mlflow_store(home: Path, tracking_uri: str | None = None) -> int:
    """Point a moved home's MLflow SQLite store at this home's ``mlartifacts/``; return the number of rows rewritten.

    ``tracking_uri`` defaults to ``$MLFLOW_TRACKING_URI`` or ``sqlite:///HOME/mlflow.db``. The store's artifact root
    is where its experiments' locations ending in ``/mlartifacts`` point (WHALE creates its experiment at
    ``<store dir>/mlartifacts``); each such root that is not this store's own is rewritten, as a ``file://`` URI and
    as a plain path, in every `MLFLOW_LOCATION_COLUMNS` column, all in one ``BEGIN IMMEDIATE`` transaction.
    Idempotent; 0 for an unmoved home, a missing store file and any store that is not SQLite (a server, Postgres).
    """
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_url(Path(home).resolve() / "mlflow.db")
    db = sqlite_path(uri)
    if db is None or not db.is_file():
        return 0
    new_uri = (db.parent / "mlartifacts").as_uri()
    con = sqlite3.connect(db, timeout=60, isolation_level=None)
    try:
        tables = {t: {c[1] for c in con.execute(f'PRAGMA table_info("{t}")')} for t, _ in MLFLOW_LOCATION_COLUMNS}
        if "artifact_location" not in tables["experiments"]:
            return 0
        con.execute("BEGIN IMMEDIATE")
        olds = sorted(
            {
                loc
                for (loc,) in con.execute("SELECT artifact_location FROM experiments")
                if isinstance(loc, str) and loc.startswith("file:") and loc.rstrip("/").endswith("/mlartifacts")
            }
            - {new_uri}
        )
        changed = 0
        for old in olds:
            old_path, new_path = _plain(old.rstrip("/")), _plain(new_uri)
            for table, column in MLFLOW_LOCATION_COLUMNS:
                if column not in tables[table]:
                    continue
                # the URI form first; the plain form only where the URI form is absent (a new path may contain
                # the old one, so the two replacements must never apply to the same value)
                cur = con.execute(
                    f'UPDATE "{table}" SET "{column}" = CASE WHEN instr("{column}", ?1) > 0 '
                    f'THEN replace("{column}", ?1, ?2) ELSE replace("{column}", ?3, ?4) END '
                    f'WHERE instr("{column}", ?1) > 0 OR instr("{column}", ?3) > 0',
                    (old.rstrip("/"), new_uri, old_path, new_path),
                )
                changed += max(cur.rowcount, 0)
        con.execute("COMMIT")
        return changed
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    finally:
        con.close()
