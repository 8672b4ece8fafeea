"""How the ``whale`` process starts and ends: SIGTERM handling and a prompt exit after a successful command.

- **SIGTERM** unwinds like an error (``SystemExit(143)``) instead of ending the process on the spot (Python's
  default), so ``finally`` blocks and ``atexit`` hooks run: Prefect stops its temporary server (otherwise left running
  as an orphan), the flow run is marked crashed and the archive keeps what finished, for ``whale resume``. A task
  still running in a worker thread finishes first (Python joins those threads at exit); SIGKILL ends it at once.
  (Inside a flow run Prefect's own handler raises its ``TerminationSignal`` instead; same unwinding.)
- **A stop request that lands in a finalizer is delivered again.** A signal handler's exception is raised wherever
  the main thread happens to be; inside a garbage-collection callback or a ``__del__`` (frequent during GRPO)
  Python prints "Exception ignored" and goes on, so the run silently finished instead of stopping (seen in the
  SIGTERM test). `run_cli` installs a ``sys.unraisablehook`` that re-sends the signal to the process when the
  ignored exception is such a stop request (``SystemExit`` from SIGTERM, Prefect's ``TerminationSignal``,
  ``KeyboardInterrupt``); the handler then raises again, in ordinary code. The signal is sent from a timer thread
  0.1 s later: raised inside the hook itself it would be ignored as well.
- **Prompt exit.** After a command that loaded torch, Prefect and MLflow, the interpreter's teardown after the last
  ``atexit`` hook (freeing every module and native library state) took ~3 s on 2 cores with no Python frame running:
  pure waiting for the user. On success, `run_cli` does what Python's exit does first, in the same order — wait for
  non-daemon threads and run the thread-exit hooks (``threading._shutdown``: Prefect's log and event workers drain
  there, while its temporary server is still up), then the ``atexit`` hooks (the server's stop, logging's flush) —
  flushes stdout/stderr and ends the process with ``os._exit``, skipping only the teardown. Every other exit (an
  error, Ctrl-C, SIGTERM) takes Python's normal path, as does a process under a profiler or tracer (``python -m
  cProfile``, coverage: they write their results after the program returns) and any interpreter without those
  hooks. Nothing WHALE writes depends on the teardown: the archive, MLflow and Prefect commit per write (SQLite
  recovers an unclosed WAL on the next open).
- **One writer per cached model.** `file_lock` serializes installs and builds into the model cache across processes
  (the tiny model, named models).
- **One driver per run.** `exclusive` takes a run's lock without waiting: a second ``whale resume RUN`` while the
  first still drives it stops at once, naming the other process, before it writes anything. The kernel drops the
  lock when its process ends, however it ends, so a killed run resumes.
- **Servers WHALE starts itself** (Prefect's temporary server, ``flows/prefect_server.py``; the served proposer's
  model, `whale_core.proposers.serve`) share one lifecycle, `ServerProcess`: wait for the first healthy answer
  (quoting the server log's tail when it exits or times out), stop with SIGTERM then SIGKILL after a grace period;
  `free_port` picks their port.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, NoReturn

__all__ = ["Busy", "ServerProcess", "exclusive", "file_lock", "free_port", "run_cli"]


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _stop_signal(exc: BaseException | None) -> int | None:
    """The signal behind a stop request raised by a signal handler, else None."""
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    if isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        return int(signal.SIGTERM)
    sig = getattr(exc, "signal", None)  # Prefect's TerminationSignal (not imported here: whale_core is Prefect-free)
    if isinstance(exc, BaseException) and not isinstance(exc, Exception) and isinstance(sig, int):
        return sig
    return None


def _redeliver_ignored_stop(unraisable: Any) -> None:
    sig = _stop_signal(unraisable.exc_value)
    if sig is None:
        _previous_unraisablehook(unraisable)
        return
    print(f"whale: a stop request (signal {sig}) landed in a finalizer; delivering it again", file=sys.stderr)
    # not from here: the handler would raise inside this hook, whose exceptions Python ignores too
    timer = threading.Timer(0.1, os.kill, (os.getpid(), sig))
    timer.daemon = True
    timer.start()


_previous_unraisablehook = sys.unraisablehook


def run_cli(app: Callable[[], object]) -> NoReturn:
    """Run a console entry point with WHALE's process handling (see the module docstring)."""
    signal.signal(signal.SIGTERM, _terminate)
    sys.unraisablehook = _redeliver_ignored_stop
    try:
        app()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise  # a failure (or a message to print) takes Python's normal exit
    shutdown_threads = getattr(threading, "_shutdown", None)
    run_exit_hooks = getattr(atexit, "_run_exitfuncs", None)
    if shutdown_threads is None or run_exit_hooks is None or sys.getprofile() or sys.gettrace():
        sys.exit(0)  # Python's own exit: also lets a profiler or coverage tool write its results
    shutdown_threads()
    run_exit_hooks()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing left to save
            stream.flush()
    os._exit(0)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive POSIX lock on ``path`` (created) for the block: one install or build of a cached model at a
    time (the tiny model, named models)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): atomic rename alone keeps the cache consistent
        yield
        return
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Busy(RuntimeError):
    """Another process holds the lock (the message names it)."""


@contextlib.contextmanager
def exclusive(path: Path, what: str, error: Callable[[str], Exception] = Busy) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created; it records this process's pid and command) for the block, or
    raise ``error(message)`` at once when another process holds it (``what`` names the thing locked)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise error(f"{what} is being driven by {holder}: wait for it to end, or stop it first") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:200]}, since {time.strftime('%F %T')})")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """The lifecycle of a server process this process started (a mixin of the dataclasses that hold it): it has a
    ``process``, a ``port``, a ``log_path`` with this server's output from ``log_offset`` on, ``started_at``
    (``time.perf_counter()`` at spawn) and ``ready_seconds``. A subclass names itself (``what``), its health URL,
    the setting that bounds its start (``timeout_key``), the error it raises and its stop grace."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    log_offset: int
    started_at: float
    ready_seconds: float | None

    timeout_key: ClassVar[str] = "start timeout"
    poll_s: ClassVar[float] = 0.1
    grace_s: ClassVar[float] = 5.0
    error: ClassVar[type[Exception]] = RuntimeError

    @property
    def what(self) -> str:
        return "the server"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float) -> float:
        """Block until the health URL answers 200; returns seconds since spawn. Raises ``error`` quoting the log's
        tail (and stops the process) if it exits or ``timeout`` passes first."""
        if self.ready_seconds is not None:
            return self.ready_seconds
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise self.error(f"{self.what} exited with code {code} before it answered{self.tail()}")
            # not listening yet (refused, reset, slow): poll again until the deadline
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError, OSError),
                urllib.request.urlopen(self.health_url, timeout=5) as response,
            ):
                if response.status == 200:
                    self.ready_seconds = time.perf_counter() - self.started_at
                    return self.ready_seconds
            if time.monotonic() > deadline:
                self.stop()
                raise self.error(f"{self.what} did not answer within {timeout:.0f} s ({self.timeout_key}){self.tail()}")
            time.sleep(self.poll_s)

    def stop(self) -> None:
        """Terminate the server: SIGTERM, then SIGKILL after ``grace_s``. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, chars: int = 2000) -> str:
        """The end of this server's output, as a clause for an error message."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode(errors="replace")[-chars:]
        except OSError:
            return ""
        return f"; its log {self.log_path} ends:\n{text}" if text.strip() else f" (its log {self.log_path} is empty)"
