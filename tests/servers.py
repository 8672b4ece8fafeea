"""Local server helpers shared by the tests that start real servers on 127.0.0.1 (MLflow, Prefect): a free port,
a health wait that fails with the server's log, and a process-group stop that escalates to SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, log: Path, limit_s: float = 180) -> None:
    """Poll ``url`` until it answers 200; fail with the log's tail if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + limit_s
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode} before {url} was healthy:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:  # not listening yet: poll again
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} not healthy after {limit_s} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the process's whole group (uvicorn workers included), escalating to SIGKILL."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
