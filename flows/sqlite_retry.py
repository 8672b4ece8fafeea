"""Quick re-sends for Prefect's SQLite write conflicts (503), before Prefect's own 2-second back-off.

Prefect's server on SQLite answers ``503 Service Unavailable`` when a write transaction loses a race with another
writer: a deferred transaction that has read cannot upgrade to a write once another connection committed
(``SQLITE_BUSY_SNAPSHOT``; SQLite's busy timeout does not apply), so the server rolls back and asks the client to
retry (an open Prefect issue, PrefectHQ/prefect#18934). Prefect's client then sleeps ``2 ** attempt`` seconds — 2 s
for the first retry — although the conflicting transaction is over within milliseconds.

Measured here: a fully cached ``whale resume`` of the default run spent 8 of its 13.7 s in four such sleeps — each
iteration subflow's tracking task (``POST /api/task_runs/``) raced the server's task-run recorder, which was writing
the burst of events of the cached tasks just before; server log: ``sqlite3.OperationalError: database is locked``.

`install` wraps the ``send`` that Prefect's HTTP clients (async and sync) hand to their retry loop: a 503 is sent
again after 0.05, 0.1, 0.2 and 0.4 s; if it still fails, the 503 goes on to Prefect's own loop, which retries with
its own back-off as before. It sends the request Prefect would re-send anyway (a 503 means the server rolled back),
only sooner; other status codes and errors are untouched. Idempotent. Simplified: the hook is Prefect's private
``_send_with_retry`` (Prefect is pinned in ``constraints.txt``); if it is missing or its signature changes,
nothing is installed and a debug line says so — runs are then as fast or slow as Prefect alone.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("whale.sqlite_retry")

__all__ = ["DELAYS", "install"]

DELAYS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)  # seconds before each quick re-send of a 503
_MARK = "_whale_quick_503"
_EXPECTED = ["self", "request", "send", "send_args", "send_kwargs", "retry_codes", "retry_exceptions"]

# indirections so that tests can record the delays instead of sleeping
_sleep: Callable[[float], None] = time.sleep
_async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


def _quick_async(send: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def quick(request: Any, *args: Any, **kwargs: Any) -> Any:
        response = await send(request, *args, **kwargs)
        for delay in DELAYS:
            if response.status_code != 503:
                break
            await response.aclose()
            await _async_sleep(delay)
            response = await send(request, *args, **kwargs)
        return response

    return quick


def _quick_sync(send: Callable[..., Any]) -> Callable[..., Any]:
    def quick(request: Any, *args: Any, **kwargs: Any) -> Any:
        response = send(request, *args, **kwargs)
        for delay in DELAYS:
            if response.status_code != 503:
                break
            response.close()
            _sleep(delay)
            response = send(request, *args, **kwargs)
        return response

    return quick


def install() -> bool:
    """Wrap Prefect's client retry loops (once per process); True when installed (now or before)."""
    try:
        from prefect.client.base import PrefectHttpxAsyncClient, PrefectHttpxSyncClient
    except ImportError as exc:  # pragma: no cover - Prefect is a dependency
        log.debug("quick 503 re-sends not installed: %s", exc)
        return False
    classes = (PrefectHttpxAsyncClient, PrefectHttpxSyncClient)
    if all(getattr(c._send_with_retry, _MARK, False) for c in classes):
        return True
    for cls in classes:
        original = getattr(cls, "_send_with_retry", None)
        if original is None or list(inspect.signature(original).parameters) != _EXPECTED:
            log.debug("quick 503 re-sends not installed: %s._send_with_retry is not the expected hook", cls.__name__)
            return False
    _wrap(PrefectHttpxAsyncClient, is_async=True)
    _wrap(PrefectHttpxSyncClient, is_async=False)
    return True


def _wrap(cls: Any, is_async: bool) -> None:
    original = cls._send_with_retry
    if getattr(original, _MARK, False):
        return
    if is_async:

        @functools.wraps(original)
        async def send_with_retry_async(self: Any, request: Any, send: Any, *args: Any, **kwargs: Any) -> Any:
            return await original(self, request, _quick_async(send), *args, **kwargs)

        wrapped: Any = send_with_retry_async
    else:

        @functools.wraps(original)
        def send_with_retry_sync(self: Any, request: Any, send: Any, *args: Any, **kwargs: Any) -> Any:
            return original(self, request, _quick_sync(send), *args, **kwargs)

        wrapped = send_with_retry_sync
    setattr(wrapped, _MARK, True)
    cls._send_with_retry = wrapped
