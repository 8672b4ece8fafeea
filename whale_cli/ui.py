"""``whale ui``: the MLflow UI (and, with ``--prefect``, the Prefect UI) on 127.0.0.1 over the home's stores.

Both servers run with the interpreter ``whale`` runs under (``python -m mlflow server``, ``python -m prefect server
start``), so ``.venv/bin/whale ui`` works without an activated venv. It prints the latest run's MLflow page (the
experiment opens on its runs: see `whale_core.records.lineage`), waits, and stops both servers on Ctrl-C or SIGTERM.
A port already in use or a server that exits early is a one-line error.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from whale_cli.common import console
from whale_core.env import setup_offline_env, sqlite_path, sqlite_url

HOST = "127.0.0.1"
START_LIMIT_S = 180.0


def ui_cmd(
    port: Annotated[int, typer.Option(min=1, max=65535, help="MLflow UI port on 127.0.0.1")] = 5000,
    prefect: Annotated[
        bool, typer.Option("--prefect", help="also start the Prefect UI over the home's Prefect DB")
    ] = False,
    prefect_port: Annotated[int, typer.Option(min=1, max=65535, help="Prefect UI port on 127.0.0.1")] = 4200,
) -> None:
    """Start the MLflow UI on 127.0.0.1 over the home's store (and the Prefect UI with --prefect); Ctrl-C stops."""
    home = setup_offline_env()
    con = console()
    say = partial(con.print, soft_wrap=True)  # one line each, whatever the terminal width
    uri = os.environ.get("MLFLOW_TRACKING_URI") or sqlite_url(home / "mlflow.db")
    store = sqlite_path(uri)
    if store is not None and not store.exists():
        say(f"no runs in {home} yet (no {home / 'mlflow.db'}): start one with `whale run`")
        raise typer.Exit(1)
    for p in [port] + ([prefect_port] if prefect else []):
        if not _port_free(p):
            say(f"error: port {p} on {HOST} is in use (choose another with --port/--prefect-port)")
            raise typer.Exit(1)
    from whale_core.records.portable import relocate_mlflow_store

    relocate_mlflow_store(home, uri)  # a moved or copied home serves its own artifacts
    base = f"http://{HOST}:{port}"
    landing = _latest_run_url(uri, base)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    servers: list[tuple[str, subprocess.Popen[bytes], str, Path]] = []
    stop = _install_stop()
    try:
        servers.append(("MLflow", *_mlflow(uri, home, port, logs / "mlflow-ui.log")))
        if prefect:
            servers.append(("Prefect", *_prefect(home, prefect_port, logs / "prefect-ui.log")))
        for name, proc, health, log in servers:
            _wait(name, proc, health, log, stop)
        say(f"MLflow UI: {base}  (store {uri})")
        say(f"latest run: {landing}" if landing else "no runs in this store yet: start one with `whale run`")
        if prefect:
            say(f"Prefect UI: http://{HOST}:{prefect_port}")
        say("Ctrl-C stops the UI" + ("s" if prefect else ""))
        while not stop:
            for name, proc, _health, log in servers:
                if proc.poll() is not None:
                    raise _Died(name, proc.returncode, log)
            time.sleep(0.5)
    except _Died as exc:
        say(f"error: {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass
    finally:
        for _name, proc, _health, _log in servers:
            _stop(proc)


class _Died(Exception):
    def __init__(self, name: str, code: int | None, log: Path) -> None:
        tail = _last_line(log)
        super().__init__(f"the {name} server exited ({code}){': ' + tail if tail else ''} (log: {log})")


def _install_stop() -> list[int]:
    """SIGTERM sets the returned flag (the main loop then stops the servers); Ctrl-C raises KeyboardInterrupt."""
    flag: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: flag.append(signum))
    return flag


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _latest_run_url(uri: str, base: str) -> str | None:
    """The latest WHALE run's MLflow page; the experiment is marked to open on its runs (an older home too)."""
    from whale_core.records.lineage import Lineage

    lineage = Lineage(uri)
    runs = lineage.client.search_runs(
        [lineage.experiment_id],
        filter_string="tags.`whale.kind` = 'run'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    return lineage.run_url(runs[0].info.run_id, base) if runs else None


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _mlflow(uri: str, home: Path, port: int, log: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", HOST, "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", uri, "--artifacts-destination", (home / "mlartifacts").as_uri()]
    return _spawn(cmd, env, log), f"http://{HOST}:{port}/health", log


def _prefect(home: Path, port: int, log: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect")}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)]
    return _spawn(cmd, env, log), f"http://{HOST}:{port}/api/health", log


def _wait(name: str, proc: subprocess.Popen[bytes], health: str, log: Path, stop: list[int]) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while not stop:
        if proc.poll() is not None:
            raise _Died(name, proc.returncode, log)
        try:
            with urllib.request.urlopen(health, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:  # not listening yet
            pass
        if time.monotonic() > deadline:
            raise _Died(name, None, log)
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Stop a server's whole process group (uvicorn workers included), SIGKILL if it takes over 20 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def _last_line(log: Path) -> str:
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""
