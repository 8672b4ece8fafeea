"""`flows.sqlite_retry`: Prefect's HTTP clients re-send a 503 quickly before their own 2-second back-off.

Against a real HTTP server on 127.0.0.1 that answers 503 a given number of times (as Prefect's server does on a
SQLite write conflict), then 200. The quick delays and Prefect's own back-off are recorded instead of slept.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from flows import sqlite_retry


class Flaky:
    """A server that answers ``status`` to the first ``failures`` POSTs, then 200."""

    def __init__(self, failures: int, status: int = 503) -> None:
        self.failures, self.status, self.posts = failures, status, 0
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                flaky.posts += 1
                failing = flaky.posts <= flaky.failures
                body = json.dumps({"exception_message": "Service Unavailable"} if failing else {"ok": True}).encode()
                self.send_response(flaky.status if failing else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                """Quiet: http.server would print every request to stderr."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[float]]]:
    """Record WHALE's quick delays and Prefect's own back-off (anyio.sleep / time.sleep in prefect.client.base)."""
    rec: dict[str, list[float]] = {"quick": [], "prefect": []}

    async def quick_async(s: float) -> None:
        rec["quick"].append(s)

    async def prefect_async(s: float) -> None:
        rec["prefect"].append(s)

    monkeypatch.setattr(sqlite_retry, "_sleep", rec["quick"].append)
    monkeypatch.setattr(sqlite_retry, "_async_sleep", quick_async)
    monkeypatch.setattr("prefect.client.base.anyio.sleep", prefect_async)
    monkeypatch.setattr("prefect.client.base.time.sleep", rec["prefect"].append)
    assert sqlite_retry.install() is True
    yield rec


def post(url: str, is_async: bool) -> httpx.Response:
    from prefect.client.base import PrefectHttpxAsyncClient, PrefectHttpxSyncClient

    if is_async:

        async def go() -> httpx.Response:
            async with PrefectHttpxAsyncClient(base_url=url) as client:
                return await client.post("/api/task_runs/", json={"name": "x"})

        return asyncio.run(go())
    with PrefectHttpxSyncClient(base_url=url) as client:
        return client.post("/api/task_runs/", json={"name": "x"})


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
def test_a_503_is_sent_again_quickly_and_prefect_never_backs_off(
    sleeps: dict[str, list[float]], is_async: bool
) -> None:
    server = Flaky(failures=2)
    try:
        response = post(server.url, is_async)
    finally:
        server.close()
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert server.posts == 3
    assert sleeps == {"quick": [0.05, 0.1], "prefect": []}


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
def test_a_lasting_503_goes_on_to_prefects_own_retries(sleeps: dict[str, list[float]], is_async: bool) -> None:
    from prefect.settings import temporary_settings

    server = Flaky(failures=10_000)
    try:
        with temporary_settings(updates={"client.max_retries": 1}), pytest.raises(httpx.HTTPStatusError, match="503"):
            post(server.url, is_async)
    finally:
        server.close()
    per_attempt = 1 + len(sqlite_retry.DELAYS)
    assert server.posts == 2 * per_attempt  # Prefect's two attempts, each with WHALE's quick re-sends
    assert sleeps["quick"] == 2 * list(sqlite_retry.DELAYS)
    # Prefect's own back-off, as without WHALE (2 s, then 4 s: Prefect 3.9 also sleeps after its last attempt)
    assert len(sleeps["prefect"]) == 2 and min(sleeps["prefect"]) >= 1


@pytest.mark.parametrize("status", [500, 404])
def test_other_errors_are_not_sent_again(sleeps: dict[str, list[float]], status: int) -> None:
    server = Flaky(failures=1, status=status)
    try:
        with pytest.raises(httpx.HTTPStatusError, match=str(status)):
            post(server.url, is_async=True)
    finally:
        server.close()
    assert server.posts == 1
    assert sleeps == {"quick": [], "prefect": []}


def test_install_is_idempotent() -> None:
    from prefect.client.base import PrefectHttpxAsyncClient, PrefectHttpxSyncClient

    assert sqlite_retry.install() is True
    hooks = (PrefectHttpxAsyncClient._send_with_retry, PrefectHttpxSyncClient._send_with_retry)
    assert sqlite_retry.install() is True
    assert (PrefectHttpxAsyncClient._send_with_retry, PrefectHttpxSyncClient._send_with_retry) == hooks
    assert all(getattr(h, "_whale_quick_503", False) for h in hooks)
