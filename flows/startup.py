"""Start-up overlap: the temporary Prefect server boots while the process loads what the run's first tasks need.

In the embedded default (no Prefect server configured) a run needs a temporary API server in a subprocess, 7–18 s
to start on a 2-core machine (imports, database migrations on a fresh ``PREFECT_HOME``). The `whale` commands start
WHALE's (`flows.prefect_server`) as their first step, before importing Prefect; `prepare` starts it if they did
not (a caller of the Python API), and where it cannot be used starts Prefect's own (`SubprocessASGIServer`,
which `get_client` then reuses) in a thread. Either way `prepare` meanwhile does, in the main thread, work the run
does anyway: the heavy imports the tasks make (torch, transformers, TRL, PEFT), loading the base policy into the
per-process policy cache, building the suite, and opening the MLflow store (its migrations on a fresh store), then
waits for the server.

Without a temporary server (a server configured) there is nothing to overlap with: only the steps every run needs
before its first task (the suite, the MLflow store) run; the heavy imports and the policy are left to the tasks, so
a fully cached ``whale resume`` against a running server never imports torch. The same holds with a temporary server
when the caller says the run will come from the cache (``compute=False``: ``whale resume`` of a run the archive
records as finished): a fully cached run needs neither torch nor the policy, and on 2 cores importing them would
only slow the server's own start.

A new home's Prefect database starts as a copy of the machine's migrated template (`flows.prefect_server`,
`whale_core.records.db_templates`): the server's first start then skips the migrations and the block registration's
inserts (measured: 9.2 s → 3.8–4.6 s for the start alone). The first new home on a machine migrates as before and, once
its server is up and before any run is written, saves its database as that template.

Only an optimization: nothing here changes what a run computes. A preload step that fails is logged and skipped (the
task that needs it fails later with its own error, retries and records); Prefect's server failing to start here is
left to Prefect's own start, which raises its own error; WHALE's failing to start raises here (see `prepare`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flows import prefect_server, sqlite_retry
from whale_core.config import WhaleConfig

log = logging.getLogger("whale.startup")

__all__ = ["StartupReport", "prepare", "uses_temporary_server"]


@dataclass
class StartupReport:
    """What `prepare` did: seconds per preload step, the server's start time, and what was skipped (with why)."""

    server_seconds: float | None = None  # None: no temporary server (a server is configured)
    waited_seconds: float = 0.0  # time the main thread waited for the server after its own preload
    steps: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def uses_temporary_server() -> bool:
    """True when this process runs against a temporary server: WHALE's (`flows.prefect_server`) or the one Prefect
    would start itself (no API URL configured)."""
    if prefect_server.current() is not None:
        return True
    from prefect.settings import get_current_settings

    s = get_current_settings()
    return not s.api.url and bool(s.server.ephemeral.enabled)


def _start_server(out: dict[str, object], timeout: int | None = None, seeded: bool = False) -> None:
    """Start Prefect's temporary server; on failure stop what was started, so Prefect's next start begins clean.

    Prefect 3.9's `SubprocessASGIServer.start` leaves the uvicorn process running when it times out (a slow start on
    a loaded machine): the next start would find that process answering on the same port and adopt it while
    tracking another, so the first one outlived the run (holding its parent's stdout open; measured here under load).
    ``timeout``: seconds to wait, default Prefect's ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (the CLI sets
    120 in `whale_core.env`). ``seeded``: the database is a copy of the machine's template, which holds the block
    registry of this same Prefect and collections (its key), so the server skips registering block types again.
    """
    t0 = time.perf_counter()
    server = None
    try:
        from prefect.server.api.server import SubprocessASGIServer
        from prefect.settings import temporary_settings

        server = SubprocessASGIServer()
        updates = {"server.register_blocks_on_start": False} if seeded else {}
        with temporary_settings(updates=updates):  # the server process takes its settings from here
            server.start(timeout=timeout)
    except Exception as exc:  # Prefect's own start on first use raises its own error
        out["error"] = exc
        if server is not None:
            try:
                server.stop()
            except Exception as stop_exc:  # pragma: no cover - best effort; the original error is what matters
                log.warning("could not stop Prefect's temporary server after a failed start: %s", stop_exc)
    out["seconds"] = time.perf_counter() - t0


def _preload_steps(cfg: WhaleConfig, overlap: bool) -> list[tuple[str, Callable[[], object]]]:
    """The steps to run now: all of them when ``overlap`` (a temporary server boots and the run will compute), else
    only what any run needs first."""

    def imports() -> None:
        import peft  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401

    def policy() -> None:
        from whale_core.records.refs import PolicyRef, load_cached

        load_cached(PolicyRef.base(cfg.model.name, cfg.model.device))

    def suite() -> None:
        from tasks.runtime import suite_of

        suite_of(cfg.suite)

    def mlflow_store() -> None:
        from whale_core.records.lineage import Lineage

        Lineage(cfg.tracking.mlflow_uri, cfg.tracking.experiment)

    needed: list[tuple[str, Callable[[], object]]] = [("suite", suite), ("mlflow_store", mlflow_store)]
    return [("imports", imports), ("policy", policy), *needed] if overlap else needed


def prepare(cfg: WhaleConfig, compute: bool = True) -> StartupReport:
    """Boot Prefect's temporary server (if one is used) while preloading; returns what it did.

    ``compute=False``: the run is expected to come back from Prefect's cache (a finished run resumed), so the heavy
    parts (torch and friends, the base policy) are not preloaded; a task that does compute loads them itself.
    The server is WHALE's own (`flows.prefect_server`; the commands start it before importing Prefect, else it is
    started here) or, where that one cannot be used, Prefect's, started here in a thread. Never raises, except when
    WHALE's server does not come up (ServerStartError quoting its log): this process's Prefect settings point at it,
    so the run could not report anything.
    """
    sqlite_retry.install()
    report = StartupReport()
    early = prefect_server.settle()  # None where the settings name a server after all
    server: dict[str, object] = {}
    thread = None
    try:
        temporary = early is None and uses_temporary_server()
    except Exception as exc:
        temporary = False
        report.skipped["server"] = f"{type(exc).__name__}: {exc}"
    if temporary:  # the command did not start WHALE's server before importing the flows: start it now
        early = prefect_server.start()
        temporary = early is None
    fresh_db, seeded = prefect_server.seed_prefect_db() if temporary else (None, False)
    if temporary:  # WHALE's could not be used (see flows/prefect_server.py): Prefect's own, in a thread
        thread = threading.Thread(
            target=_start_server, args=(server, None, seeded), name="whale-prefect-server", daemon=True
        )
        thread.start()
    for name, step in _preload_steps(cfg, overlap=(thread is not None or early is not None) and compute):
        t0 = time.perf_counter()
        try:
            step()
        except Exception as exc:
            report.skipped[name] = f"{type(exc).__name__}: {exc}"
            log.warning("start-up preload %s skipped: %s", name, report.skipped[name])
        report.steps[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if early is not None:
        from prefect.settings import get_current_settings

        report.server_seconds = early.wait(get_current_settings().server.ephemeral.startup_timeout_seconds)
        fresh_db = early.fresh_db
    elif thread is not None:
        thread.join()
        report.server_seconds = float(server.get("seconds", 0.0))  # type: ignore[arg-type]
        if "error" in server:
            report.skipped["server"] = f"{type(server['error']).__name__}: {server['error']}"
            log.warning("Prefect's temporary server did not start early: %s", report.skipped["server"])
            fresh_db = None
    report.waited_seconds = time.perf_counter() - t0
    if fresh_db is not None:  # migrated by the server just now, nothing of a run written yet
        prefect_server.save_prefect_template(fresh_db)
    log.debug("start-up: %s", report)
    return report
