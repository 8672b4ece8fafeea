"""User errors through the real `whale` CLI: one line ``error: <message>`` on stderr, exit code 2, no traceback.

The guard is structural (every command and sub-command runs inside the root group's ``invoke``, which catches any
`WhaleError`): model and adapter paths, hub ids, devices, numeric bounds of every command, a missing database driver.
Also: each single-leg command gets its own traces directory, even two started in the same second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from whale_cli import common, compare
from whale_cli.app import app
from whale_cli.guard import GuardedGroup
from whale_core.errors import WhaleError

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _one_error_line(res: object, *fragments: str) -> str:
    """The result is exit 2, stderr ends with the one line ``error: …`` holding every fragment (before it at most a
    library's progress bar, e.g. transformers' "Loading weights"), and there is no traceback."""
    out, err, code = res.stdout, res.stderr, res.exit_code  # type: ignore[attr-defined]
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert lines and lines[-1].startswith("error: "), err
    assert sum("error" in line.lower() for line in lines) == 1, err
    assert "Traceback" not in out + err
    for f in fragments:
        assert f in lines[-1], (f, lines[-1])
    return lines[-1]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _absent_cuda() -> str:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"cuda:{count}"  # one past the last GPU: cuda:0 on a machine without CUDA


def test_every_command_runs_inside_the_guard() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, GuardedGroup)
    names = set(group.commands)  # type: ignore[attr-defined]
    assert {"eval", "train", "search", "run", "resume", "rerun", "runs", "deploy", "ui", "config", "compare"} <= names


def test_guard_is_structural_one_line_and_leaves_bugs_alone() -> None:
    """A WhaleError subclass the CLI has never heard of is one line (a multi-line message joined, rich markup kept
    verbatim); a bug keeps its exception."""

    class FreshError(WhaleError):
        pass

    probe = typer.Typer(cls=GuardedGroup)

    @probe.command()
    def user() -> None:
        raise FreshError("first line\n  second [bold]line[/] with markup")

    @probe.command()
    def bug() -> None:
        raise RuntimeError("a bug")

    line = _one_error_line(runner.invoke(probe, ["user"]))
    assert line == "error: first line; second [bold]line[/] with markup"
    res = runner.invoke(probe, ["bug"])
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--model", "/nonexistent/model"], ["'/nonexistent/model' is neither 'tiny'", "local model directory"]),
        (["--model", "HuggingFaceTB/x"], ["looks like a hub id", "never downloads"]),
        (["--adapter", "/nonexistent/adapter"], ["adapter directory /nonexistent/adapter does not exist"]),
        (["--batch-size", "0"], ["--batch-size", "greater than or equal to 1"]),
        (["--batch-size", "-4"], ["--batch-size", "greater than or equal to 1"]),
        (["-n", "0"], ["'-n'", "greater than or equal to 1"]),
        (["-n", "-3"], ["'-n'", "greater than or equal to 1"]),
        (["--device", "nonsense"], ["unknown device 'nonsense'", "auto, cpu, cuda, cuda:N or mps"]),
        (["--device", "meta"], ["unsupported device 'meta'"]),
    ],
)
def test_eval_user_errors_are_one_line(home: Path, args: list[str], fragments: list[str]) -> None:
    _one_error_line(runner.invoke(app, ["eval", *args]), *fragments)


def test_eval_model_directory_without_config_json(home: Path, tmp_path: Path) -> None:
    (tmp_path / "not-a-model").mkdir()
    _one_error_line(runner.invoke(app, ["eval", "--model", str(tmp_path / "not-a-model")]), "has no config.json")
    _one_error_line(runner.invoke(app, ["eval", "--adapter", str(tmp_path / "not-a-model")]), "not a PEFT adapter")


def test_eval_absent_cuda_device(home: Path) -> None:
    dev = _absent_cuda()
    _one_error_line(runner.invoke(app, ["eval", "--device", dev, "-n", "1"]), f"device '{dev}' is not available")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["train", "--steps", "0"], "'--steps'"),
        (["train", "-n", "0"], "'-n'"),
        (["search", "-k", "0"], "'-k' / '--candidates'"),
        (["search", "-k", "65"], "'-k' / '--candidates'"),
        (["ui", "--port", "0"], "'--port'"),
        (["compare", "--seeds", "0"], "'--seeds'"),
        (["compare", "--matrix-n", "0"], "'--matrix-n'"),
    ],
)
def test_numeric_bounds_of_every_command(home: Path, args: list[str], fragment: str) -> None:
    _one_error_line(runner.invoke(app, args), fragment, "Invalid value")


def test_commands_that_caught_their_own_errors_go_through_the_guard(home: Path, tmp_path: Path) -> None:
    _one_error_line(runner.invoke(app, ["config", "--set", "wieghts.steps=7"]), "unknown key 'wieghts'")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n b: {\n")  # the YAML parser's message spans several lines
    _one_error_line(runner.invoke(app, ["config", "--config", str(bad)]), "is not valid YAML")
    _one_error_line(runner.invoke(app, ["compare", "--modes", "bogus"]), "--modes: unknown mode")
    _one_error_line(runner.invoke(app, ["compare", "--sweep-phase", "0,2"]), "sweep_phase")
    # whole runs check the config's model and device before any flow (compare starts no server before that)
    _one_error_line(runner.invoke(app, ["compare", "--set", "model.device=nonsense"]), "unknown device 'nonsense'")
    _one_error_line(runner.invoke(app, ["compare", "--set", "model.name=/nonexistent"]), "is neither 'tiny'")


def _whale(args: list[str], env: dict[str, str], *, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """The real console entry point in a fresh interpreter (``prelude`` runs first, e.g. to hide a module)."""
    code = f"{prelude}\nimport sys\nfrom whale_cli.app import main\nsys.argv = ['whale', *sys.argv[1:]]\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--model", "HuggingFaceTB/x"], "looks like a hub id"), (["--batch-size", "0"], "--batch-size")],
)
def test_a_long_error_is_one_line_on_a_narrow_terminal(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = _whale(["eval", *args], {"WHALE_HOME": str(tmp_path), "COLUMNS": "60", "TERM": "xterm"})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], res.stderr
    assert len(lines[0]) > 60  # longer than the terminal, still one line
    assert "Traceback" not in res.stdout + res.stderr


@pytest.mark.slow
def test_run_with_a_bad_model_fails_before_any_flow_run(tmp_path: Path) -> None:
    res = _whale(["run", "--set", "model.name=/nonexistent/model"], {"WHALE_HOME": str(tmp_path)})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert lines[-1].startswith("error: model '/nonexistent/model' is neither"), res.stderr
    assert "Traceback" not in res.stderr and "Flow run" not in res.stderr  # refused before the flow started
    from whale_core.records.archive import Archive

    with Archive(f"sqlite:///{tmp_path / 'whale.db'}") as archive:
        assert archive.runs() == []


def test_a_home_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    res = runner.invoke(app, ["eval", "-n", "1"], env={"WHALE_HOME": str(taken)})
    _one_error_line(res, f"the WHALE home {taken} cannot be created", "set WHALE_HOME")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full (every write: ENOSPC)")
def test_a_full_disk_is_one_line(home: Path) -> None:
    res = runner.invoke(app, ["eval", "-n", "1", "--device", "cpu", "--out", "/dev/full"])
    _one_error_line(res, "No space left on device", "free space")


# ---------------------------------------------------------------------------------------- concurrent commands (item 6)
def test_run_dirs_started_in_the_same_second_are_distinct(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.time, "strftime", lambda fmt, *a: "20261206-020000")
    dirs = [common.run_dir("eval") for _ in range(3)]
    assert [d.name for d in dirs] == ["eval-20261206-020000", "eval-20261206-020000-2", "eval-20261206-020000-3"]
    assert all(d.is_dir() and not any(d.iterdir()) for d in dirs)


def test_two_processes_racing_for_run_dirs_never_share_one(tmp_path: Path) -> None:
    """Two processes, each claiming 30 directories as fast as it can under one frozen timestamp: 60 distinct ones,
    each holding exactly one process's marker (before the fix both processes got the same directory)."""
    script = textwrap.dedent(
        """
        import os, sys, time
        time.strftime = lambda fmt, *a: "20261206-020000"
        from whale_cli import common
        for i in range(30):
            d = common.run_dir("eval")
            (d / f"{sys.argv[1]}-{i}").write_text("x")
        """
    )
    env = {**os.environ, "WHALE_HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, tag], cwd=REPO, env=env) for tag in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    dirs = list((tmp_path / "runs").iterdir())
    assert len(dirs) == 60
    assert all(len(list(d.iterdir())) == 1 for d in dirs)


def test_two_evals_in_the_same_second_keep_both_traces(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.time, "strftime", lambda fmt, *a: "20261206-020000")
    for n in ("2", "3"):
        res = runner.invoke(app, ["eval", "-n", n, "--device", "cpu"])
        assert res.exit_code == 0, res.output
    traces = sorted((home / "runs").glob("*/traces.jsonl"))
    assert [p.parent.name for p in traces] == ["eval-20261206-020000", "eval-20261206-020000-2"]
    assert [len(p.read_text().splitlines()) for p in traces] == [2, 3]  # the first one's traces survived


def test_generated_compare_ids_are_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    """`whale compare` without --id: two started in the same second must not resume each other."""
    from whale_core.science.compare import check_compare_id

    monkeypatch.setattr(compare.time, "strftime", lambda fmt, *a: "20261206-020000")
    ids = {compare.new_compare_id() for _ in range(20)}
    assert len(ids) == 20 and all(check_compare_id(i) == i and i.startswith("cmp-20261206-020000-") for i in ids)


# ------------------------------------------------------------------------------------------- Postgres driver (item 8)
def test_missing_postgres_driver_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """An installation without the `postgres` extra (psycopg2 not importable) and WHALE_DB_URL on Postgres."""
    url = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
    hide = "import sys\nsys.modules['psycopg2'] = None  # as if not installed"
    res = _whale(["runs"], {"WHALE_HOME": str(tmp_path), "WHALE_DB_URL": url}, prelude=hide)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "pip install -c constraints.txt -e '.[postgres]'" in lines[0] and "Traceback" not in res.stderr


def test_postgres_extra_installs_the_driver_sqlalchemy_imports() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["postgres"] == ["psycopg2-binary>=2.9"]
    pins = (REPO / "constraints.txt").read_text().splitlines()
    assert any(p.startswith("psycopg2-binary==") for p in pins)
    from sqlalchemy.engine import make_url

    dialect = make_url("postgresql+psycopg2://u@h/d").get_dialect()
    assert dialect.import_dbapi().__name__ == "psycopg2"  # the module psycopg2-binary provides


@pytest.fixture
def pg_db_url() -> object:
    """A throw-away database on the local server (trust auth), dropped afterwards: reruns never collide."""
    import uuid

    from sqlalchemy import create_engine, text

    admin = create_engine("postgresql+psycopg2://postgres@127.0.0.1:5432/test", isolation_level="AUTOCOMMIT")
    name = f"whale_cli_{uuid.uuid4().hex[:12]}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_archive_round_trip_on_postgres_through_the_cli(
    pg_db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from whale_core.records.archive import Archive

    monkeypatch.setenv("WHALE_DB_URL", pg_db_url)
    with Archive() as archive:  # the default URL: $WHALE_DB_URL
        assert archive.safe_url == pg_db_url
        run = archive.create_run(name=f"pg-{time.time_ns()}", mode="search", config={"suite": "arith"})
    res = runner.invoke(app, ["runs"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert run.id in res.stdout and "search" in res.stdout
    assert not (home / "whale.db").exists()  # nothing went to the embedded SQLite store


def test_a_full_disk_inside_a_library_error_is_one_line() -> None:
    """Issue 30, item 10: a full disk during a checkpoint save ended in a ``SafetensorError … No space left``
    traceback (rc 1). The guard finds the environment's cause inside a library's own error too. (The error is the one
    safetensors raises on ENOSPC, text as seen in that run: a real full disk cannot be made here without root.)"""
    import typer
    from safetensors import SafetensorError

    from whale_cli.guard import GuardedGroup, environment_cause

    def save() -> None:
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    with pytest.raises(SafetensorError) as err:
        save()
    assert "No space left on device" in (environment_cause(err.value) or "")
    assert environment_cause(ValueError("a bug")) is None
    demo = typer.Typer(cls=GuardedGroup)
    demo.command("save")(save)
    demo.command("other")(lambda: None)
    res = runner.invoke(demo, ["save"])
    _one_error_line(res, "No space left on device (SafetensorError", "free space")
