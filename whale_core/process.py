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
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["file_lock", "run_cli"]


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
