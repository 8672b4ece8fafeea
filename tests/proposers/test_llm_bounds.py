"""A hostile proposer server cannot hang or swamp a harness leg (issue 30, items 2 and 3): a call ends within
``timeout x (num_retries + 1)`` whatever the server does; a reply is read to a bound, only ``k + EXTRA_BLOCKS`` of its
blocks are parsed, and only bounded excerpts of rejected texts are stored.

The servers are real HTTP servers on 127.0.0.1 (the paid provider API they stand in for cannot run here)."""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.proposers import LLMProposer, ProposerUnavailable
from whale_core.proposers.llm import EXTRA_BLOCKS, MAX_REPLY_CHARS
from whale_core.records.archive import Archive
from whale_core.records.recorder import MAX_STORED_TEXT, Recorder

KEY_ENV = "WHALE_TEST_PROPOSER_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-bounds-" + secrets.token_hex(8))


class SlowLoris:
    """Answers 200 with a JSON body it sends one byte every ``every`` seconds, for as long as the client listens."""

    def __init__(self, every: float = 0.5) -> None:
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                try:
                    while not outer.stop.wait(every):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except OSError:
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_slow_loris_server_cannot_hold_the_leg_past_its_deadline(make_ctx: Any, seed_harness: Harness) -> None:
    """Before: a byte every 2 s kept ``whale search`` waiting past ``search.timeout=20`` until killed (4 min)."""
    srv = SlowLoris(every=0.5)
    try:
        p = LLMProposer("openai/test-model", api_base=srv.api_base, api_key_env=KEY_ENV, timeout=2, num_retries=0)
        import litellm  # noqa: F401  (its import, slow on a busy machine, is not the wait under test)

        start = time.monotonic()
        with pytest.raises(ProposerUnavailable, match=r"no complete reply within 2 s"):
            p.propose(make_ctx(seed_harness), 2)
        # the server would hold the reply for 50,000 s (100,000 bytes, 2 a second): a loose bound is still a hang's
        # detector, and holds on a busy 2-core machine
        assert time.monotonic() - start < 120
    finally:
        srv.close()


def test_a_flood_of_blocks_is_read_to_a_bound(server: Any, make_ctx: Any, seed_harness: Harness) -> None:
    """Before: 20,000 YAML blocks (k = 2) took 2 min 33 s and 680 MB, every surplus block validated and stored."""
    blocks = [f"```yaml\n{seed_harness.evolve(instruction=f'Variant {i}.').text}```" for i in range(20_000)]
    server.push("\n".join(blocks))
    p = LLMProposer("openai/test-model", api_base=server.api_base, api_key_env=KEY_ENV, timeout=30, num_retries=0)
    props = p.propose(make_ctx(seed_harness), 2)  # bounded by what is read, not by time (no timed assertion)
    assert len(props) <= 2 + EXTRA_BLOCKS + 2 and sum(x.status == "valid" for x in props) == 2
    unread = [x.reason for x in props if x.reason and "were not read" in x.reason]
    assert len(unread) == 1 and "at most k + 8 = 10 are" in unread[0], unread
    assert len(json.dumps([x.text for x in props])) < 2 * MAX_REPLY_CHARS


def test_a_huge_rejected_text_is_stored_as_an_excerpt(
    server: Any, make_ctx: Any, seed_harness: Harness, tmp_path: Path
) -> None:
    """Before: a reply holding a 10 MB template was rejected as too large — and its full text stored. Now such a
    reply is cut at `MAX_REPLY_CHARS` (its unclosed block is one rejection without text), and a block under the cut but
    over the harness bound is stored as an 8 KiB excerpt."""
    p = LLMProposer("openai/test-model", api_base=server.api_base, api_key_env=KEY_ENV, timeout=30, num_retries=0)
    huge = seed_harness.text.replace("template:", "template: '" + "x" * 10_000_000 + "'\nold:", 1)
    server.push(f"```yaml\n{huge}```")
    props = p.propose(make_ctx(seed_harness), 2)
    assert [x.status for x in props] == ["rejected"] and "never closed" in (props[0].reason or "")
    assert not any(x.text for x in props)
    big = seed_harness.text.replace("template:", "template: '" + "x" * 150_000 + "'\nold:", 1)
    server.push(f"```yaml\n{big}```")
    [prop] = p.propose(make_ctx(seed_harness), 2)
    assert prop.status == "rejected" and prop.text is not None and len(prop.text) > 100_000
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    archive.create_run("r", "harness-only", {}, run_id="r")
    Recorder(archive, run_id="r").candidate(None, None, p.name, "rejected", prop.reason, text=prop.text)
    [row] = archive.candidates("r")
    assert row.text is not None and len(row.text) < MAX_STORED_TEXT + 100 and "more characters not stored" in row.text
