"""`whale ui`'s one-line refusals, without starting a server: a home with no runs, a port already in use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _ui(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PATH="/usr/bin:/bin")
    cmd = [sys.executable, "-m", "whale_cli", "ui", *args]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_a_home_without_runs_says_so(tmp_path: Path) -> None:
    res = _ui(tmp_path)
    assert res.returncode == 1
    assert "no runs in" in res.stdout and "whale run" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "mlflow.db").exists()  # nothing created by looking


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    from whale_core.records.lineage import Lineage

    Lineage(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a store, so that the port is what stops it
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = _ui(tmp_path, "--port", str(port))
    assert res.returncode == 1
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    assert lines == [f"error: port {port} on 127.0.0.1 is in use (choose another with --port/--prefect-port)"]
    assert "Traceback" not in res.stderr
