"""The project home's databases stay inside it, whatever its path holds (issue 30, item 6)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from whale_core.env import setup_offline_env, sqlite_path, sqlite_url


@pytest.fixture(autouse=True)
def _own_environment() -> Iterator[None]:
    """`setup_offline_env` writes os.environ directly: put the process's environment back whole afterwards (a
    leaked PREFECT_SERVER_DATABASE_CONNECTION_URL pointed a later test's Prefect server at this test's home)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_home_whose_path_a_url_would_decode_keeps_every_database_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``WHALE_HOME`` containing ``%20`` put all three databases in a sibling directory (the URL-decoded path)."""
    home = tmp_path / "a%20b c?d#e"
    for var in ("PREFECT_HOME", "PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL",
                "WHALE_DB_URL", "MLFLOW_TRACKING_URI"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WHALE_HOME", str(home))
    setup_offline_env()
    from whale_core.records.archive import Archive
    from whale_core.records.archive.store import default_url
    from whale_core.records.lineage import Lineage
    from whale_core.records.mlflow_store import default_uri

    assert make_url(default_url()).database == str(home.resolve() / "whale.db")
    assert sqlite_path(default_uri()) == home.resolve() / "mlflow.db"
    prefect = make_url(os.environ["PREFECT_SERVER_DATABASE_CONNECTION_URL"])
    assert prefect.database == str(home.resolve() / "prefect" / "prefect.db")
    Archive().close()
    Lineage(default_uri(), "whale")
    assert (home / "whale.db").is_file() and (home / "mlflow.db").is_file()
    outside = [p for p in tmp_path.rglob("*") if home not in p.parents and p != home]
    # MLflow makes the parent directory of its sqlite path undecoded (_make_parent_dirs_if_sqlite in mlflow.store.db):
    # an empty directory beside the home, nothing in it
    assert all(p.is_dir() and not any(p.iterdir()) for p in outside), outside
    assert sqlite_path(sqlite_url("/x/y z%41.db")) == Path("/x/y z%41.db")
