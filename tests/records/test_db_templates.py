"""`whale_core.records.db_templates`: a new home's SQLite databases start from a migrated template; nothing of a run
leaks."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import stat
from pathlib import Path

import pytest

from whale_core.records import db_templates
from whale_core.records.db_templates import cache_dir, save, seed, template_path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WHALE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def migrated_db(path: Path, *, wal: bool = False, runs: int = 0) -> Path:
    """A database as a library leaves it after migrating: a schema version, a static registry, empty run tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as con:
        if wal:
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE alembic_version (version_num TEXT)")
        con.execute("INSERT INTO alembic_version VALUES ('abc123')")
        con.execute("CREATE TABLE registry (name TEXT)")
        con.executemany("INSERT INTO registry VALUES (?)", [("a",), ("b",)])
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, home TEXT)")
        con.executemany("INSERT INTO runs (home) VALUES (?)", [(str(path),)] * runs)
        con.commit()
    return path


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return con.execute(sql).fetchall()


def test_cache_dir_follows_whale_cache_dir_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WHALE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == (tmp_path / "xdg" / "whale").resolve()
    monkeypatch.setenv("WHALE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == (tmp_path / "mine").resolve()
    path = template_path("prefect", "3.9.1+prefect_dask=0.3.7/../x")
    assert path.parent == (tmp_path / "mine" / "db-templates").resolve()
    assert path.name == "prefect-3.9.1+prefect_dask_0.3.7_.._x.db"  # a key never leaves the templates folder


def test_a_saved_template_seeds_a_new_database(cache: Path, tmp_path: Path) -> None:
    first = migrated_db(tmp_path / "home1" / "app.db", wal=True)  # a server's live WAL database
    assert save(first, "app", "1.0", allowed={"alembic_version", "registry"}) is True
    template = template_path("app", "1.0")
    assert rows(template, "PRAGMA journal_mode") == [("delete",)]  # one self-contained file
    assert not list(template.parent.glob(".*.tmp"))

    second = tmp_path / "home2" / "app.db"
    assert seed(second, "app", "1.0") is True
    assert rows(second, "SELECT version_num FROM alembic_version") == [("abc123",)]
    assert rows(second, "SELECT name FROM registry ORDER BY name") == [("a",), ("b",)]
    assert stat.S_IMODE(second.stat().st_mode) == 0o644
    assert not list(second.parent.glob(".*.tmp"))
    # another key (another library version) has no template: nothing seeded, the library migrates as usual
    assert seed(tmp_path / "home3" / "app.db", "app", "2.0") is False
    assert not (tmp_path / "home3" / "app.db").exists()
    # an existing template is never replaced
    assert (
        save(migrated_db(tmp_path / "home4" / "app.db"), "app", "1.0", allowed={"alembic_version", "registry"}) is False
    )


def test_a_database_holding_a_run_never_becomes_a_template(
    cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    used = migrated_db(tmp_path / "home" / "app.db", runs=2)
    with caplog.at_level(logging.WARNING, logger="whale.db_templates"):
        assert save(used, "app", "1.0", allowed={"alembic_version", "registry"}) is False
    assert not template_path("app", "1.0").exists()
    assert "tables ['runs'] hold rows" in caplog.text
    assert not list(template_path("app", "1.0").parent.glob(".*.tmp"))
    # a scrub that removes this home's rows makes the same database acceptable; the source is left as it was
    assert save(used, "app", "1.0", allowed={"alembic_version", "registry"},
                scrub=lambda con: con.execute("DELETE FROM runs")) is True  # fmt: skip
    assert rows(template_path("app", "1.0"), "SELECT count(*) FROM runs") == [(0,)]
    assert rows(used, "SELECT count(*) FROM runs") == [(2,)]


def test_seed_never_touches_an_existing_database(cache: Path, tmp_path: Path) -> None:
    save(migrated_db(tmp_path / "a" / "app.db"), "app", "1.0", allowed={"alembic_version", "registry"})
    existing = migrated_db(tmp_path / "b" / "app.db", runs=3)
    assert seed(existing, "app", "1.0") is False
    assert rows(existing, "SELECT count(*) FROM runs") == [(3,)]


def test_a_database_created_meanwhile_wins_over_the_copy(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(migrated_db(tmp_path / "a" / "app.db"), "app", "1.0", allowed={"alembic_version", "registry"})
    target = tmp_path / "b" / "app.db"
    real_backup = db_templates._backup

    def racing_backup(source: Path, dest: Path) -> None:  # another process creates the database during the copy
        real_backup(source, dest)
        migrated_db(target, runs=1)

    monkeypatch.setattr(db_templates, "_backup", racing_backup)
    assert seed(target, "app", "1.0") is False
    assert rows(target, "SELECT count(*) FROM runs") == [(1,)]
    assert not list(target.parent.glob(".*.tmp"))


@pytest.mark.parametrize("content", [b"not a database at all" * 100, None])
def test_an_invalid_template_is_removed_and_nothing_is_seeded(
    cache: Path, tmp_path: Path, content: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    template = template_path("app", "1.0")
    template.parent.mkdir(parents=True)
    if content is None:  # a valid SQLite file that was never migrated
        with contextlib.closing(sqlite3.connect(template)) as con:
            con.execute("CREATE TABLE registry (name TEXT)")
    else:
        template.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="whale.db_templates"):
        assert seed(tmp_path / "home" / "app.db", "app", "1.0") is False
    assert not (tmp_path / "home" / "app.db").exists()
    assert not template.exists()  # the next new home re-creates it
    assert "unreadable or not migrated" in caplog.text


def test_failures_are_logged_never_raised(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    save(migrated_db(tmp_path / "a" / "app.db"), "app", "1.0", allowed={"alembic_version", "registry"})

    def broken(source: Path, dest: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(db_templates, "_backup", broken)
    with caplog.at_level(logging.WARNING, logger="whale.db_templates"):
        assert seed(tmp_path / "b" / "app.db", "app", "1.0") is False
        assert save(migrated_db(tmp_path / "c" / "app.db"), "app", "2.0", allowed={"alembic_version"}) is False
    assert not (tmp_path / "b" / "app.db").exists() and not template_path("app", "2.0").exists()
    assert caplog.text.count("OSError: disk full") == 2


# ------------------------------------------------------------------------------------------------ MLflow (real)
def test_a_new_mlflow_store_starts_from_the_template_with_its_own_default_experiment(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from whale_core.records.lineage import Lineage

    monkeypatch.chdir(tmp_path)
    first = Lineage(f"sqlite:///{tmp_path / 'home1' / 'mlflow.db'}", "whale")
    first.ensure_run("run-a", "run-a", params={"seed": 1})
    template = next((cache / "db-templates").glob("mlflow-*.db"))
    assert rows(template, "SELECT count(*) FROM experiments") == [(0,)]  # no experiment, not even MLflow's default
    assert rows(template, "SELECT count(*) FROM runs") == [(0,)]

    with caplog.at_level(logging.DEBUG, logger="whale.db_templates"):
        second = Lineage(f"sqlite:///{tmp_path / 'home2' / 'mlflow.db'}", "whale")
    assert "seeded from" in caplog.text
    default = second.client.get_experiment("0")  # created on open with this store's own artifact path
    assert default.name == "Default"
    assert default.artifact_location == first.client.get_experiment("0").artifact_location  # same cwd, same rule
    assert second.runs_of("run-a") == []  # nothing of the first home
    run = second.ensure_run("run-b", "run-b", params={"seed": 2})
    second.log_metrics(run, {"val": 0.5}, step=1)
    assert second.client.get_run(run).data.metrics == {"val": 0.5}
    assert [r.info.run_id for r in second.runs_of("run-b")] == [run]
