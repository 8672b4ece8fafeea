"""Pre-migrated database templates: a new project home's SQLite databases start as a copy of a migrated one.

A brand-new ``$WHALE_HOME`` used to pay for schema migrations on every first run: Prefect's temporary server
migrated an empty ``prefect.db`` and registered its block types (server start 8–9 s instead of 3 s on 2 cores) and
MLflow migrated an empty ``mlflow.db`` (1.3 s instead of 0.5 s). These migrations produce the same database on every
home with the same library version, so the first home on a machine saves a snapshot of its freshly migrated database
into a machine-wide cache, and every later new home starts from a copy.

Contract:
- Only an optimization: `seed` and `save` never raise; a failure is logged and the caller carries on as without a
  template (the library then migrates as usual).
- A template holds the schema and the library's own static rows only: `save` copies a database with SQLite's backup
  API (consistent while a server has it open), applies the caller's ``scrub``, and refuses the snapshot when any table
  outside ``allowed`` has rows — no run, flow, experiment or log of one home ever reaches another.
- Keyed by the caller (library and collection versions): a template is never used across versions. The library
  still runs its own start-up checks on the copy (Prefect's migrate-on-start, MLflow's schema check).
- `seed` only fills a path that does not exist yet, atomically (hard link of a complete copy): a concurrent opener
  sees no database or a complete one, never half a file; an existing database is never touched.

Cache location: ``$WHALE_CACHE_DIR``, else ``$XDG_CACHE_HOME/whale``, else ``~/.cache/whale``; templates live in
``db-templates/`` there and may be deleted at any time (the next new home re-creates them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

log = logging.getLogger("whale.db_templates")

__all__ = ["cache_dir", "save", "seed", "template_path"]

_SAFE = re.compile(r"[^A-Za-z0-9_.+\-]")


def cache_dir() -> Path:
    """The machine-wide WHALE cache: ``$WHALE_CACHE_DIR``, ``$XDG_CACHE_HOME/whale`` or ``~/.cache/whale``."""
    explicit = os.environ.get("WHALE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache").expanduser().resolve() / "whale"


def template_path(kind: str, key: str) -> Path:
    """Where the template of database ``kind`` (``prefect``, ``mlflow``) for ``key`` (versions) lives."""
    return cache_dir() / "db-templates" / f"{_SAFE.sub('_', kind)}-{_SAFE.sub('_', key)}.db"


def _valid(path: Path) -> bool:
    """A readable SQLite file that passes ``quick_check`` and carries an Alembic version (a migrated schema)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            if con.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return False
            return bool(con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1)
    except sqlite3.Error:
        return False


def _tmp_beside(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    return Path(name)


def _backup(source: Path, dest: Path) -> None:
    """Copy a SQLite database with the backup API (a consistent snapshot, WAL contents included)."""
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(sqlite3.connect(dest)) as dst:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it


def _publish(tmp: Path, target: Path) -> bool:
    """Move a complete file into place unless ``target`` exists already (then the other file wins)."""
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def seed(db_path: Path, kind: str, key: str) -> bool:
    """Create ``db_path`` as a copy of the ``kind``/``key`` template, when it does not exist and a template does.

    Returns True when the database was seeded. Never raises: no template, an invalid one (deleted, so the next new
    home re-creates it), or any I/O error leaves ``db_path`` absent for the library to create as usual.
    """
    tmp: Path | None = None
    try:
        if db_path.exists():
            return False
        template = template_path(kind, key)
        if not template.is_file():
            return False
        if not _valid(template):
            log.warning("database template %s is unreadable or not migrated; removed", template)
            template.unlink(missing_ok=True)
            return False
        tmp = _tmp_beside(db_path)
        _backup(template, tmp)
        tmp.chmod(0o644)  # as the library would have created it (mkstemp makes 0600)
        seeded = _publish(tmp, db_path)
        if seeded:
            log.debug("%s seeded from %s", db_path, template)
        return seeded
    except Exception as exc:
        log.warning("could not seed %s from a template: %s: %s", db_path, type(exc).__name__, exc)
        return False
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def save(
    db_path: Path,
    kind: str,
    key: str,
    allowed: Collection[str],
    scrub: Callable[[sqlite3.Connection], object] | None = None,
) -> bool:
    """Save a snapshot of the freshly migrated ``db_path`` as the ``kind``/``key`` template (unless one exists).

    ``scrub`` runs on the snapshot (e.g. delete a row that names this home's paths); afterwards every table with rows
    must be in ``allowed``, or the snapshot is refused. Returns True when a template was written. Never raises.
    """
    tmp: Path | None = None
    try:
        template = template_path(kind, key)
        if template.exists() or not db_path.is_file():
            return False
        tmp = _tmp_beside(template)
        _backup(db_path, tmp)
        with contextlib.closing(sqlite3.connect(tmp)) as con:
            if scrub is not None:
                scrub(con)
                con.commit()
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            filled = [t for t in tables if not t.startswith("sqlite_") and _has_rows(con, t)]
            extra = sorted(set(filled) - set(allowed))
            if extra:
                log.warning(
                    "no %s database template saved: tables %s hold rows (only %s may)", kind, extra, sorted(allowed)
                )
                return False
            con.execute("VACUUM")
        if not _valid(tmp):
            log.warning("no %s database template saved: the snapshot of %s is not a migrated database", kind, db_path)
            return False
        saved = _publish(tmp, template)
        if saved:
            log.debug("saved %s as the database template %s", db_path, template)
        return saved
    except Exception as exc:
        log.warning("could not save a %s database template from %s: %s: %s", kind, db_path, type(exc).__name__, exc)
        return False
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _has_rows(con: sqlite3.Connection, table: str) -> bool:
    quoted = '"' + table.replace('"', '""') + '"'
    return con.execute(f"SELECT 1 FROM {quoted} LIMIT 1").fetchone() is not None
