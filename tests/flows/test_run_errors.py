"""User errors of the run commands, through the real CLI: one line ``error: …`` on stderr, exit code 2, no traceback,
and nothing recorded. The archive errors come from the library (`ArchiveError`, a `WhaleError`), which the CLI's
guard prints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flow_helpers import make_home, whale

from whale_core.records.archive import Archive


def _one_line_error(out: object, *needles: str) -> str:
    rc, stderr = out.returncode, out.stderr  # type: ignore[attr-defined]
    assert rc == 2, f"exit {rc}:\n{out.stdout[-2000:]}{stderr[-3000:]}"  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    for needle in needles:
        assert needle in lines[-1], lines[-1]
    return str(lines[-1])


@pytest.fixture
def home_with_a_run(tmp_path: Path, models_dir: Path) -> tuple[dict[str, str], Archive]:
    """A home whose archive holds run ``r1`` with legs in iterations 0 and 1 (records only: nothing was computed)."""
    env = make_home(tmp_path, models_dir)
    archive = Archive(f"sqlite:///{Path(env['WHALE_HOME']) / 'whale.db'}")
    archive.create_run("r1", "whale-adaptive", {}, run_id="r1")
    for i, kind in enumerate(("harness", "weights")):
        leg = archive.start_leg("r1", i, kind)  # type: ignore[arg-type]
        archive.finish_leg(leg.id, budget_used=1)
    return env, archive


def test_resume_and_rerun_of_an_unknown_run(home_with_a_run: tuple[dict[str, str], Archive]) -> None:
    env, _ = home_with_a_run
    _one_line_error(whale(env, "resume", "nope", timeout=300), "no run 'nope'")
    _one_line_error(whale(env, "rerun", "nope", "--iteration", "0", timeout=300), "no run 'nope'")


def test_run_with_the_id_of_an_existing_run_says_resume(home_with_a_run: tuple[dict[str, str], Archive]) -> None:
    env, archive = home_with_a_run
    _one_line_error(whale(env, "run", "--run-id", "r1", timeout=300), "already exists", "whale resume r1")
    assert [r.id for r in archive.runs()] == ["r1"] and archive.get_run("r1").config == {}  # left as it was


def test_rerun_of_an_iteration_the_run_does_not_have(home_with_a_run: tuple[dict[str, str], Archive]) -> None:
    """Before: exit 0, a ``rerun`` decision row and duplicate MLflow metrics for an iteration that never ran."""
    env, archive = home_with_a_run
    _one_line_error(whale(env, "rerun", "r1", "--iteration", "7", timeout=300), "iterations 0, 1", "--iteration 7")
    assert archive.decisions("r1") == []  # nothing recorded


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("notaurl", "is not a database URL"),
        (
            "postgresql+psycopg2://nobody@127.0.0.1:1/x",
            "cannot open the archive postgresql+psycopg2://nobody@127.0.0.1:1/x",
        ),
    ],
)
def test_an_unusable_whale_db_url(tmp_path: Path, models_dir: Path, url: str, needle: str) -> None:
    env = make_home(tmp_path, models_dir)
    env["WHALE_DB_URL"] = url
    command = ["run", "--set", "iterations=1"] if url == "notaurl" else ["resume", "r1"]  # one process each
    _one_line_error(whale(env, *command, timeout=300), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--run-id", "it's"], "run id \"it's\" is not a plain name"),
        (["run", "--run-id", "[/bold]x"], "run id '[/bold]x' is not a plain name"),
        (["run", "--run-id", "x" * 300], "longer than 100 characters"),
        (["resume", "/tmp/elsewhere"], "run id '/tmp/elsewhere' is not a plain name"),
        (["resume", "../.."], "run id '../..' is not a plain name"),
        (["rerun", "../x", "--iteration", "0"], "run id '../x' is not a plain name"),
    ],
)
def test_a_run_id_that_is_not_a_plain_name_is_refused_before_anything_is_made(
    tmp_path: Path, models_dir: Path, args: list[str], needle: str
) -> None:
    """Issue 30, item 5: a quote gave a ValueError traceback after 50 s and left the run `running`; markup a
    traceback; 300 characters `OSError: File name too long`; an absolute path or ``../..`` to resume created a
    directory and whale.log outside the home. Now one rule (`whale_core.records.run_ids`), checked first."""
    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    before = {p for p in tmp_path.rglob("*")}
    _one_line_error(whale(env, *args, timeout=300), needle)
    made = {p for p in tmp_path.rglob("*")} - before
    assert not made, made  # no run directory, log, database or server state
    assert not (home / "whale.db").exists()


def test_a_second_driver_of_a_run_stops_before_it_writes(home_with_a_run: tuple[dict[str, str], Archive]) -> None:
    """Issue 30, item 8: two ``whale resume RUN`` at once both finished (rc 0) and the archive held two ``done``
    weights legs for one iteration. A run is driven by one process: the second stops at once, naming the first."""
    from whale_core.process import exclusive

    env, archive = home_with_a_run
    before = (archive.get_run("r1").status, len(archive.legs("r1")), len(archive.decisions("r1")))
    lock = Path(env["WHALE_HOME"]) / "runs" / "r1" / ".lock"
    with exclusive(lock, "run 'r1'"):  # this process drives r1 now
        line = _one_line_error(whale(env, "resume", "r1", timeout=300), "run 'r1' is being driven by pid ")
        _one_line_error(whale(env, "rerun", "r1", "--iteration", "1", timeout=300), "is being driven by pid ")
    assert str(os.getpid()) in line
    assert (archive.get_run("r1").status, len(archive.legs("r1")), len(archive.decisions("r1"))) == before
