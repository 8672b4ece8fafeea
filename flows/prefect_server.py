"""The temporary Prefect API server of a run that has no server configured, started by WHALE as early as it can.

With no API URL configured, Prefect starts a temporary server itself on its first API call (its
`SubprocessASGIServer`: uvicorn in a subprocess serving ``prefect.server.api.server:create_app``). Two costs of that
on a 2-core machine, measured for a `whale` command: the server only starts once the command has imported Prefect
and its flows and reached its first API call, and the command's own process imports the whole server package just
to get that class (``prefect.server.api.server``: 3.7 s of CPU beyond ``import prefect`` and ~90 MB, in a process
that only ever talks HTTP to it), on the same two cores where the server process imports the same package.

`start` spawns the same server process (same module and factory; ``PREFECT__SERVER_EPHEMERAL`` mode: no UI, the
ephemeral set of services) as a `whale` command's first step, before ``import prefect``, and sets
``PREFECT_API_URL`` to it (child processes, e.g. a Dask cluster's workers, reach the same server). Prefect in the
command's process is then a plain client of a server that boots while the command imports and preloads
(`flows.startup.prepare` waits for it). The server process itself reads Prefect's settings (profile, environment)
and reports on a pipe (`_serve`): if they name a server after all, or turn the temporary one off, it exits and
`settle` withdraws it before the first API call, so the settings are Prefect's own again; otherwise it says whether
its database is new (the template to save) and serves. Called after Prefect's import (a Python API caller), `start`
passes the process's settings on and updates them with Prefect's own `refresh_global_settings_context`.

Differences from Prefect's own server, all deliberate:

- the server dies with the process that started it (Linux ``PR_SET_PDEATHSIG``): Prefect's outlives a ``SIGKILL``ed
  run (measured: it kept the killed run's stdout open);
- its output goes to ``$PREFECT_HOME/temporary-server.log`` (not the command's terminal); a start that fails raises
  `ServerStartError` quoting it;
- a new home's database starts as a copy of the machine's migrated template (`whale_core.records.db_templates`) and then
  skips the block registration the template already holds; the first new home saves the template;
- its task-run recorder writes task runs in batches (`RECORDER_BATCH` events, at least every `RECORDER_FLUSH_S`
  seconds, and at shutdown) instead of one SQLite transaction per event (Prefect's default, batch size 1). Every
  task emits its events as it starts, and recording them one by one took the CPU from the task's own first
  seconds: on 2 cores a small candidate-scoring rollout ran 63–66 ms as the first call in a task against 39–43 ms
  with batching (41–42 ms as a second call in the same task; `docs/orchestration.md`). The Prefect UI shows a task
  run up to `RECORDER_FLUSH_S` later; a user's own ``server.services.task_run_recorder`` settings win.

`start` does nothing (returns None) when ``PREFECT_API_URL`` is set, when Prefect already started its own server in
this process, or (called after Prefect's import) when the settings name a server or the change would not reach
them (a ``temporary_settings`` block is active): Prefect's own temporary server is then used as before. Only where
the same server runs changes; nothing a run computes does.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from whale_core.errors import WhaleError
from whale_core.process import ServerProcess, free_port
from whale_core.records import db_templates

if TYPE_CHECKING:
    from prefect.settings import Settings

log = logging.getLogger("whale.prefect_server")

RECORDER_BATCH = 200  # task-run events per insert (Prefect's default: 1)
RECORDER_FLUSH_S = 2.0  # at most this long between inserts (Prefect's default: 5 s, moot at batch size 1)
# How long `TemporaryServer.stop` lets the server shut down after SIGTERM before it SIGKILLs it. The recorder's last
# batch is written during that shutdown (a SIGKILLed server loses it), and on a loaded 2-core machine the shutdown
# can take longer than the 5 s Prefect's own server gets; an idle one stops in well under a second.
STOP_GRACE_S = 60.0

__all__ = [
    "ServerStartError",
    "TemporaryServer",
    "current",
    "save_prefect_template",
    "seed_prefect_db",
    "settle",
    "start",
]

# The child sets PR_SET_PDEATHSIG (prctl option 1) so that the kernel sends it SIGTERM when the thread that spawned
# it dies, checks that this parent is still alive (it may have died before the prctl), then hands over to
# `_serve` (which reports on the status pipe and runs uvicorn). argv: parent pid, status fd, WHALE's source root.
_LAUNCHER = """
import ctypes, os, signal, sys
parent, status_fd = int(sys.argv.pop(1)), int(sys.argv.pop(1))
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
if os.getppid() != parent:
    sys.exit(0)
sys.path.insert(0, sys.argv.pop(1))
from flows.prefect_server import _serve
_serve(status_fd)
"""


# Tables a freshly started Prefect server fills by itself: the schema version and its block registry.
_PREFECT_TEMPLATE_TABLES = {"alembic_version", "block_type", "block_schema", "block_schema_reference"}


def _prefect_template_key() -> str:
    """Prefect's version and its installed collections (they add block types to a new database)."""
    from importlib.metadata import entry_points, version

    collections = sorted(
        f"{e.name}={e.dist.version if e.dist else '?'}" for e in entry_points(group="prefect.collections")
    )
    return "+".join([version("prefect"), *collections])


def _prefect_sqlite_file(settings: Settings | None = None) -> Path | None:
    """The temporary server's SQLite database file (None for Postgres or an in-memory database)."""
    from sqlalchemy.engine import make_url

    if settings is None:
        from prefect.settings import get_current_settings

        settings = get_current_settings()
    secret = settings.server.database.connection_url
    url = make_url(secret.get_secret_value()) if secret is not None else None
    if url is None or not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser().resolve()


def seed_prefect_db(settings: Settings | None = None) -> tuple[Path | None, bool]:
    """A new home's Prefect database starts as a copy of the machine's migrated template (see
    `whale_core.records.db_templates`): the temporary server's first start drops from 8–9 s to ~3.5 s on 2 cores.

    Returns ``(path, False)`` when the database is new and no template exists (the caller saves it as the template
    once the server has migrated it), ``(None, True)`` when it was seeded, else ``(None, False)``. Never raises.
    """
    try:
        path = _prefect_sqlite_file(settings)
        if path is None or path.exists():
            return None, False
        if db_templates.seed(path, "prefect", _prefect_template_key()):
            return None, True
        return path, False
    except Exception as exc:  # only an optimization: Prefect creates the database as usual
        log.warning("no Prefect database template used: %s: %s", type(exc).__name__, exc)
        return None, False


def save_prefect_template(path: Path) -> None:
    try:
        db_templates.save(path, "prefect", _prefect_template_key(), allowed=_PREFECT_TEMPLATE_TABLES)
    except Exception as exc:  # pragma: no cover - save itself never raises; the key's imports are loaded already
        log.warning("no Prefect database template saved: %s: %s", type(exc).__name__, exc)


class ServerStartError(WhaleError, RuntimeError):
    """WHALE's temporary server exited or did not answer in time (the message quotes its log's tail)."""


@dataclass
class TemporaryServer(ServerProcess):
    """A server process this process started, its port, and what its database started from; its lifecycle (wait,
    stop) is `whale_core.process.ServerProcess`'s."""

    timeout_key: ClassVar[str] = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    poll_s: ClassVar[float] = 0.05
    grace_s: ClassVar[float] = STOP_GRACE_S  # its shutdown writes the task-run recorder's last batch
    error: ClassVar[type[Exception]] = ServerStartError

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    log_offset: int  # where this server's output starts in the (shared, appended) log
    started_at: float  # time.perf_counter() at spawn
    status_fd: int  # the pipe the server process reports on before it serves (see `_serve`)
    _status: dict[str, Any] | None = None
    ready_seconds: float | None = None  # spawn to the first healthy answer (set by `wait`)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def what(self) -> str:
        return "Prefect's temporary server"

    @property
    def health_url(self) -> str:
        return f"{self.api_url}/health"

    def status(self) -> dict[str, Any]:
        """What the server process decided once it read Prefect's settings (blocks until it said so, ~2 s after the
        spawn): ``{"configured": True}`` when the settings name a server or turn the temporary one off (the process
        then exits), else ``{"configured": False, "fresh_db": path or None, "seeded": bool}``. A process that died
        before saying so reads as not configured (`wait` then reports its exit)."""
        if self._status is None:
            chunks = []
            while chunk := os.read(self.status_fd, 4096):
                chunks.append(chunk)
            os.close(self.status_fd)
            try:
                self._status = dict(json.loads(b"".join(chunks) or b"{}"))
            except ValueError:
                self._status = {}
        return self._status

    @property
    def configured(self) -> bool:
        return bool(self.status().get("configured"))

    @property
    def fresh_db(self) -> Path | None:
        """A new database this start migrates: save it as the machine's template once the server answers."""
        path = self.status().get("fresh_db")
        return Path(path) if path else None

_current: TemporaryServer | None = None


def current() -> TemporaryServer | None:
    """The server `start` started in this process (None if it did not)."""
    return _current


def recorder_batching(settings: Settings) -> dict[str, str]:
    """The environment that makes the temporary server's task-run recorder write in batches (see the module
    docstring); empty where the settings (environment or profile) choose its batch size or flush interval."""
    if {"batch_size", "flush_interval"} & settings.server.services.task_run_recorder.model_fields_set:
        return {}
    return {
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": str(RECORDER_BATCH),
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": str(RECORDER_FLUSH_S),
    }


def _serve(status_fd: int) -> None:
    """The server process's side (run by `_LAUNCHER`): read Prefect's settings, report on the status pipe, serve.

    Deciding here, not in the process that starts it, lets a `whale` command spawn the server before it imports
    Prefect itself (~2 s on 2 cores, which the server spends importing in parallel).
    """
    import runpy

    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    status: dict[str, Any] = {"configured": bool(settings.api.url) or not settings.server.ephemeral.enabled}
    if not status["configured"]:
        fresh_db, seeded = seed_prefect_db(settings)
        status.update(fresh_db=str(fresh_db) if fresh_db else None, seeded=seeded)
        os.environ.update(PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1", PREFECT__SERVER_FINAL="1")
        if seeded:  # the template holds this Prefect's and collections' block registry already
            os.environ["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] = "false"
        os.environ.update(recorder_batching(settings))
        refresh_global_settings_context()
    os.write(status_fd, json.dumps(status).encode())
    os.close(status_fd)
    if status["configured"]:
        sys.exit(0)
    sys.argv[0] = "uvicorn"
    runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)


def start() -> TemporaryServer | None:
    """Spawn the temporary server and point this process's Prefect settings at it; see the module docstring.

    Call from the main thread (the server lives as long as the spawning thread) before the first Prefect API call;
    best before ``import prefect``. Idempotent; returns None where it does nothing. Never raises: a failed spawn is
    logged and Prefect starts its own server as usual. Whether the settings name a server after all is known once
    the server process has read them: `settle` (called by `flows.startup.prepare`) withdraws this one then.
    """
    global _current
    if _current is not None:
        return _current
    if os.environ.get("PREFECT_API_URL"):
        return None
    server = None
    try:
        imported = "prefect.context" in sys.modules
        env = dict(os.environ)
        if imported:  # pass on what this process's settings hold (a `temporary_settings` block among them)
            from prefect.settings import get_current_settings

            settings = get_current_settings()
            if settings.api.url or not settings.server.ephemeral.enabled:
                return None
            prefects_own = sys.modules.get("prefect.server.api.server")
            if prefects_own is not None and getattr(prefects_own.SubprocessASGIServer, "_instances", None):
                return None  # Prefect started its own already: the process talks to that one
            env.update(settings.to_environment_variables(exclude_unset=True))
        spec = find_spec("prefect")
        if spec is None or not spec.submodule_search_locations:
            return None
        app_dir = str(Path(next(iter(spec.submodule_search_locations))).parent)
        home = Path(env.get("PREFECT_HOME", "~/.prefect")).expanduser()
        home.mkdir(parents=True, exist_ok=True)
        log_path = home / "temporary-server.log"
        port = free_port()
        read_fd, write_fd = os.pipe()
        args = [sys.executable, "-c", _LAUNCHER, str(os.getpid()), str(write_fd), str(Path(__file__).parents[1])]
        args += ["--app-dir", app_dir, "--factory", "prefect.server.api.server:create_app"]
        args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"]
        try:
            with log_path.open("ab") as out:
                offset = out.tell()
                # its own session: Ctrl-C at the terminal (SIGINT to the run's process group) must not kill the
                # server under the run, which then spent minutes retrying a dead API; it still dies with the run
                # (the death signal) and at its exit (`stop`)
                process = subprocess.Popen(
                    args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                    start_new_session=True,
                )  # fmt: skip
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        server = TemporaryServer(process, port, log_path, offset, time.perf_counter(), read_fd)
        atexit.register(server.stop)
        os.environ["PREFECT_API_URL"] = server.api_url
        if imported:
            _refresh_settings(server.api_url)
    except Exception as exc:
        log.warning("no early Prefect server (Prefect starts its own): %s: %s", type(exc).__name__, exc)
        if server is not None:
            _withdraw(server)
        return None
    _current = server
    return server


def settle() -> TemporaryServer | None:
    """The server `start` started, once its process has read Prefect's settings; None if there is none or the
    settings name a server after all (a profile's ``PREFECT_API_URL``): this one is then withdrawn and this
    process's settings are Prefect's own again. Call before the first Prefect API call."""
    global _current
    server = _current
    if server is not None and server.configured:
        _withdraw(server)
        _current = None
        return None
    return server


def _refresh_settings(expected: str | None) -> None:
    """Make Prefect's process-wide settings follow the environment (Prefect's own hook for that)."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    refresh_global_settings_context()
    if expected is not None and get_current_settings().api.url != expected:  # a `temporary_settings` block is active
        raise RuntimeError("Prefect's settings in this context do not follow PREFECT_API_URL")


def _withdraw(server: TemporaryServer) -> None:
    server.stop()
    if os.environ.get("PREFECT_API_URL") == server.api_url:
        os.environ.pop("PREFECT_API_URL")
        if "prefect.context" in sys.modules:
            with contextlib.suppress(Exception):
                _refresh_settings(None)
