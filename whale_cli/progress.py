"""The console of a run: one live progress line per leg, one result line when it ends, everything else to a log file.

`run_console` is what ``whale run``/``resume``/``rerun`` (and ``whale compare``) wrap a run in. It shows the
`whale_core.progress` events (GRPO steps, scored candidates, leg results) with rich, and, unless ``verbose``, moves
every other console log handler — Prefect's per-task and per-flow lines with their temporary-server URLs, MLflow's,
transformers' (and its "Loading weights" bars) — and Python warnings to ``log_path`` (``runs/<id>/whale.log``).
``--verbose`` leaves those handlers where they are: the console then shows what the log file would hold.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from whale_core import progress as events

_WORKER_CONSOLE = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"
_FORMAT = "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"
_RUN_FORMAT = "%(asctime)s | %(levelname)-7s | {} run %({}_run_name)r - %(message)s"


class ConsoleProgress(logging.Handler):
    """Renders progress events: a transient rich Live line per leg, a printed line per leg result. On a console that
    is not a terminal (a pipe, a CI log) the leg's last progress line is printed before its result."""

    def __init__(self, console: Any) -> None:
        super().__init__(logging.INFO)
        self.console = console
        self.live: Any = None
        self.last: str | None = None
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        ev = events.event_of(record)
        if ev is None:
            return
        with self._guard:
            if ev["kind"] == "leg_result":
                self.close_line()
                self.console.print(record.getMessage(), highlight=False)
                return
            self.last = record.getMessage()
            if not self.console.is_terminal:
                return
            from rich.live import Live
            from rich.text import Text

            if self.live is None:
                self.live = Live(Text(self.last), console=self.console, refresh_per_second=4, transient=True)
                self.live.start()
            else:
                self.live.update(Text(self.last))

    def close_line(self) -> None:
        """End the current leg's live line (printed once when the console is not a terminal)."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        elif self.last is not None and not self.console.is_terminal:
            self.console.print(self.last, highlight=False)
        self.last = None


def _console_handler(h: logging.Handler) -> bool:
    """A handler that writes to the console: a stream handler on anything but a file or an in-memory buffer (MLflow's
    writes through its own stderr wrapper; pytest's capture handlers write to a StringIO and stay)."""
    if not isinstance(h, logging.StreamHandler) or isinstance(h, logging.FileHandler):
        return False
    return not isinstance(getattr(h, "stream", None), io.StringIO)


class RunLog(logging.FileHandler):
    """The run's ``whale.log``. When the file cannot be written (a full disk, a quota, a file system gone read-only)
    it says so once on stderr and writes nothing more, instead of logging's "--- Logging error ---" and a traceback
    per record: the run's own error, if its work hits the same disk, is the one line that matters."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self.broken = True
        sys.stderr.write(f"note: the log {self.baseFilename} stops here: {exc.strerror or exc}\n")


@contextlib.contextmanager
def leg_console(console: Any) -> Iterator[None]:
    """Show progress events on ``console`` for the duration, and nothing else changed (``whale search``, ``whale
    train``: one leg in this process, no orchestrator's log lines to move away)."""
    renderer = ConsoleProgress(console)
    events.LOGGER.addHandler(renderer)
    try:
        yield
    finally:
        events.LOGGER.removeHandler(renderer)
        renderer.close_line()


@contextlib.contextmanager
def run_console(console: Any, log_path: Path | None, verbose: bool = False) -> Iterator[None]:
    """Show progress events on ``console`` for the duration; without ``verbose``, send all other console logging
    (and warnings) to ``log_path``. Restores the handlers on exit."""
    import prefect  # noqa: F401  (its logging setup runs on import: its console handlers must exist to be moved)

    renderer = ConsoleProgress(console)
    events.LOGGER.addHandler(renderer)
    swapped: list[tuple[logging.Logger, logging.Handler, logging.Handler]] = []
    file_handler: logging.FileHandler | None = None
    if not verbose and log_path is not None:
        import mlflow  # noqa: F401  (configures its own stderr handler on import)
        import transformers.utils.logging as tf_logging

        log_path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = RunLog(log_path, encoding="utf-8")
        from prefect.logging.formatters import PrefectFormatter

        file_handler.setFormatter(  # Prefect's own line shapes ("Task run 'grpo-update-iter1' - Finished ...")
            PrefectFormatter(_FORMAT, flow_run_fmt=_RUN_FORMAT.format("Flow", "flow"),
                             task_run_fmt=_RUN_FORMAT.format("Task", "task"))
        )  # fmt: skip
        tf_logging.disable_progress_bar()
        tf_logging.disable_default_handler()
        tf_logging.enable_propagation()
        logging.captureWarnings(True)
        loggers = [logging.getLogger()] + [
            lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
        ]
        for lg in loggers:
            for h in list(lg.handlers):
                if _console_handler(h):
                    lg.removeHandler(h)
                    lg.addHandler(file_handler)
                    swapped.append((lg, h, file_handler))
        if not any(file_handler in lg.handlers for lg in loggers[:1]):
            logging.getLogger().addHandler(file_handler)
            swapped.append((logging.getLogger(), file_handler, file_handler))
        # worker processes (Dask) configure Prefect's logging anew from the environment: their console handler
        # shows warnings only (Prefect's PREFECT_LOGGING_<path> override of logging.yml)
        env_before = os.environ.get(_WORKER_CONSOLE)
        os.environ[_WORKER_CONSOLE] = "WARNING"
    try:
        yield
    finally:
        renderer.close_line()
        events.LOGGER.removeHandler(renderer)
        for lg, old, new in swapped:
            lg.removeHandler(new)
            if old is not new:
                lg.addHandler(old)
        if file_handler is not None:
            logging.captureWarnings(False)
            file_handler.close()
            if env_before is None:
                os.environ.pop(_WORKER_CONSOLE, None)
            else:
                os.environ[_WORKER_CONSOLE] = env_before
