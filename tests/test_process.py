"""`whale_core.process.run_cli`: prompt exit on success, Python's normal exit otherwise; SIGTERM unwinds."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from whale_core.process import run_cli

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
# Prefect's log and event workers drain in a thread-exit hook: it must run, and before the atexit hooks
threading._register_atexit(lambda: (out / "thread-hook").write_text(str((out / "atexit").exists())))
mode = sys.argv[2]

def app():
    print("output before exit", flush=False)  # unflushed: run_cli must flush it
    if mode == "fail":
        sys.exit(3)
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "thread":
        def work():
            time.sleep(1.0)
            (out / "thread").write_text("done")
        threading.Thread(target=work).start()
    if mode == "sleep":
        (out / "ready").write_text("")
        time.sleep(60)
    if mode == "finalizer":
        class Slow:
            def __del__(self):
                (out / "ready").write_text("")
                time.sleep(5)  # SIGTERM arrives here: Python ignores an exception raised in __del__
        obj = Slow()
        del obj
        time.sleep(60)
        print("finished as if never stopped")

if mode == "profiled":
    sys.setprofile(lambda *args: None)  # as `python -m cProfile` or coverage would
try:
    run_cli(app)
finally:
    (out / "returned").write_text("")  # only on Python's normal exit path: os._exit skips it
"""


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_success_runs_atexit_hooks_and_flushes_output(tmp_path: Path) -> None:
    res = _run(tmp_path, "ok")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "returned").exists()  # the prompt exit was taken
    assert res.stdout == "output before exit\n"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread-hook").read_text() == "False"  # ran, and before the atexit hooks


@pytest.mark.parametrize(("mode", "code"), [("fail", 3), ("raise", 1)])
def test_failure_keeps_its_status_and_runs_atexit_hooks(tmp_path: Path, mode: str, code: int) -> None:
    res = _run(tmp_path, mode)
    assert res.returncode == code, res.stderr
    assert "output before exit" in res.stdout
    assert (tmp_path / "atexit").read_text() == "ran"
    if mode == "raise":
        assert "RuntimeError: boom" in res.stderr


def test_under_a_profiler_the_normal_exit_is_taken(tmp_path: Path) -> None:
    res = _run(tmp_path, "profiled")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "returned").exists()  # so cProfile or coverage can write their results
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_working_thread_is_waited_for(tmp_path: Path) -> None:
    res = _run(tmp_path, "thread")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "thread").read_text() == "done"  # os._exit would have cut it off
    assert (tmp_path / "atexit").read_text() == "ran"


@pytest.mark.parametrize("mode", ["sleep", "finalizer"])
def test_sigterm_unwinds_with_status_143_and_runs_atexit_hooks(tmp_path: Path, mode: str) -> None:
    """Also when the signal lands inside a finalizer (``__del__``, a GC callback), where Python ignores exceptions."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path), mode],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=50)  # less than the script's sleep: a lost stop request times out here
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "finished as if never stopped" not in out
    if mode == "finalizer":
        assert "delivering it again" in err
    assert (tmp_path / "atexit").read_text() == "ran"
