"""`flows.prefect_server`: WHALE's temporary Prefect server: when it starts, that it dies with its process, and the
errors a server that does not come up gives (real processes throughout)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_helpers import REPO, make_home, python, whale

from flows import prefect_server
from flows.prefect_server import ServerStartError, TemporaryServer
from whale_core.process import free_port


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


KILLED = """
from whale_core.env import setup_offline_env
setup_offline_env()
from flows import prefect_server
server = prefect_server.start()
server.wait(300)
print("PID", server.process.pid, flush=True)
import time
time.sleep(300)
"""


def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path, models_dir: Path) -> None:
    """A SIGKILLed run leaves no server behind (Prefect's own temporary server outlives it)."""
    env = make_home(tmp_path, models_dir)
    proc = subprocess.Popen([sys.executable, "-c", KILLED], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server answered
        assert line.startswith("PID"), line
        pid = int(line.split()[1])
        assert _alive(pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the server outlived the process that started it"
    finally:
        proc.kill()


PROFILE = """
import json, os
from whale_core.env import setup_offline_env
setup_offline_env()
from flows import prefect_server
server = prefect_server.start()  # before Prefect is imported: the environment names no server
spawned = server is not None
from prefect.settings import get_current_settings
settled = prefect_server.settle()  # the server process read the profile: it names a server
print("RESULT" + json.dumps({
    "spawned": spawned,
    "settled": settled is not None,
    "current": prefect_server.current() is not None,
    "api_url": get_current_settings().api.url,
    "env_url": os.environ.get("PREFECT_API_URL"),
    "server_exit": server.process.wait(30) if server else None,
}))
"""


def test_a_server_the_profile_names_wins_over_the_temporary_one(tmp_path: Path, models_dir: Path) -> None:
    """The command spawns the temporary server before Prefect has read its profile; the server process reads it,
    says it names a server, and exits; the command's Prefect settings are the profile's again."""
    import json

    env = make_home(tmp_path, models_dir)
    home = Path(env["PREFECT_HOME"])
    home.mkdir(parents=True)
    (home / "profiles.toml").write_text(
        'active = "remote"\n[profiles.remote]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n'
    )
    out = python(env, "-c", PROFILE, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))[len("RESULT") :])
    assert res.pop("server_exit") in (0, -signal.SIGTERM)  # it exits after saying so, or `settle` stops it first
    assert res == {
        "spawned": True,
        "settled": False,
        "current": False,
        "api_url": "http://127.0.0.1:9/api",
        "env_url": None,
    }


def _server(tmp_path: Path, args: list[str]) -> TemporaryServer:
    log = tmp_path / "server.log"
    log.write_bytes(b"an earlier server's output\n")
    offset = log.stat().st_size
    with log.open("ab") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    return TemporaryServer(process, free_port(), log, offset, time.perf_counter(), read_fd)


def test_a_server_that_exits_is_an_error_quoting_its_own_log(tmp_path: Path) -> None:
    server = _server(tmp_path, [sys.executable, "-c", "print('database is not writable'); raise SystemExit(3)"])
    with pytest.raises(ServerStartError, match="exited with code 3") as err:
        server.wait(60)
    assert "database is not writable" in str(err.value)
    assert "an earlier server" not in str(err.value)  # only this start's output is quoted


def test_a_server_that_never_answers_is_stopped_and_an_error(tmp_path: Path) -> None:
    server = _server(tmp_path, [sys.executable, "-c", "import time; time.sleep(120)"])
    with pytest.raises(ServerStartError, match="did not answer within 1 s"):
        server.wait(1)
    assert server.process.poll() is not None  # stopped, not left running


def test_no_server_is_started_where_one_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setattr(prefect_server, "_current", None)
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert prefect_server.start() is None
    assert prefect_server.current() is None


def test_whale_run_reports_a_server_that_does_not_come_up_and_exits_cleanly(tmp_path: Path, models_dir: Path) -> None:
    """A broken Prefect database (here: a file that is not a database) is an error quoting the server's log, exit
    code 2, no traceback."""
    env = make_home(tmp_path, models_dir)
    db = Path(env["PREFECT_HOME"]) / "prefect.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database " * 100)
    out = whale(env, "run", "--set", "iterations=1", timeout=600)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    text = " ".join((out.stdout + out.stderr).split())  # the console wraps long lines
    assert "error: Prefect's temporary server exited with code" in text
    assert "file is not a database" in text  # quoted from the server's log
    assert "whale_core" not in text and "flows/" not in text  # no traceback of WHALE's own (only the server's)


RECORDED = """
from whale_core.env import setup_offline_env
setup_offline_env()
from flows import prefect_server
server = prefect_server.start()
from flows.startup import prepare
from whale_core.config import load_config
prepare(load_config(None, []), compute=False)
from prefect import flow, task

@task
def double(x: int) -> int:
    return 2 * x

@flow
def five() -> list[int]:
    return [double(i) for i in range(5)]

assert five() == [0, 2, 4, 6, 8]
server.stop()  # what the command's exit does
print("STOPPED", server.process.returncode, flush=True)
"""


def test_task_runs_recorded_in_batches_are_all_written_when_the_server_stops(tmp_path: Path, models_dir: Path) -> None:
    """WHALE's server records task runs in batches (up to 2 s late); none of a run's is lost at its end."""
    import sqlite3

    env = make_home(tmp_path, models_dir)
    out = python(env, "-c", RECORDED, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: -15 is a clean stop
    assert "STOPPED -15" in out.stdout or "STOPPED 0" in out.stdout, out.stdout[-2000:]
    db = Path(env["PREFECT_HOME"]) / "prefect.db"
    with sqlite3.connect(db) as con:
        rows = con.execute("select name, state_type from task_run").fetchall()
    assert len(rows) == 5 and {state for _, state in rows} == {"COMPLETED"}, rows


def test_recorder_batching_yields_to_the_users_own_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import Settings

    for key in ("BATCH_SIZE", "FLUSH_INTERVAL"):
        monkeypatch.delenv(f"PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_{key}", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "none.toml"))
    assert prefect_server.recorder_batching(Settings()) == {
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": str(prefect_server.RECORDER_BATCH),
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": str(prefect_server.RECORDER_FLUSH_S),
    }
    monkeypatch.setenv("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE", "1")  # the user's choice
    assert prefect_server.recorder_batching(Settings()) == {}
    monkeypatch.delenv("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE")
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        'active = "mine"\n[profiles.mine]\nPREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL = 9\n'
    )
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(profiles))
    assert Settings().server.services.task_run_recorder.flush_interval == 9
    assert prefect_server.recorder_batching(Settings()) == {}
