"""Fixtures for the proposer tests: a seed harness, context builders, and a scripted OpenAI-compatible server.

`ScriptedOpenAI` is a real HTTP server (stdlib ``http.server`` in a thread, random free port on 127.0.0.1) that
speaks the OpenAI chat-completions API (``POST /v1/chat/completions``). It stands in for a paid provider API — the
one place in the test suite where one is replaced by a local server — and replays scripted replies: a message
content, an HTTP error status, or a reply delayed past the client's timeout. It records every request (path,
headers, JSON body) so tests can check what the proposer sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.proposers import FORMAT_REFERENCE, ArchiveEntry, FailingTrace, ProposalContext

SEED_HARNESS = """\
whale_harness: 1
name: plain-sum
instruction: Add the two numbers.
template: "{{ instruction }}\\n{{ a }}+{{ b }}="
fewshot: {k: 2, select: random}
answer: {reverse: false, pad: 0, sep: ""}
parse: [{regex: '^\\s*(-?[0-9]+)'}]
decoding: {temperature: 0.0, max_new_tokens: 8, stop: ["\\n"]}
inference: {samples: 1, aggregate: majority}
"""
SUITE_DESCRIPTION = "Integer addition: each problem gives two integers a and b; the answer is their sum, exactly."


@pytest.fixture(scope="session")
def seed_harness() -> Harness:
    return Harness.from_text(SEED_HARNESS)


def entry_for(
    h: Harness, score: float | None = 0.3, status: str = "incumbent", reason: str | None = None
) -> ArchiveEntry:
    return ArchiveEntry(
        sha=h.sha, text=h.text, score=score, n=200, status=status, reason=reason, parent=h.parent, prompt_tokens=21.0
    )


def make_context(
    incumbent: Harness,
    archive: list[ArchiveEntry] | None = None,
    traces: list[FailingTrace] | None = None,
    restrict_to: frozenset[str] | None = None,
    seed: int = 0,
    iteration: int = 0,
) -> ProposalContext:
    return ProposalContext(
        suite_description=SUITE_DESCRIPTION,
        format_reference=FORMAT_REFERENCE,
        incumbent=entry_for(incumbent),
        archive=archive or [],
        failing_traces=traces or [],
        restrict_to=restrict_to,
        seed=seed,
        iteration=iteration,
    )


# --------------------------------------------------------------------------------------- scripted server


@dataclass
class Reply:
    """One scripted reply: ``content`` with HTTP 200, or an error ``status``; ``delay`` seconds before answering."""

    content: str = ""
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    echo_auth: bool = False  # put the request's Authorization header into the error body (a leaky server)
    finish_reason: str = "stop"  # "length": a reply cut off at max_tokens


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes


class ScriptedOpenAI:
    """A local OpenAI chat-completions server; ``script`` is consumed one reply per request (then 200 "ok")."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Seen] = []
        self.refuse_formats: set[str] = set()  # response_format types answered 400 (without using a scripted reply)
        self._release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw or b"{}")
                kind = (body.get("response_format") or {}).get("type")
                with server._lock:
                    server.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw))
                    if kind in server.refuse_formats:
                        reply = Reply(f"response_format {kind!r} is not supported by this model", status=400)
                    else:
                        reply = server.script.pop(0) if server.script else Reply("ok")
                if reply.delay:
                    server._release.wait(reply.delay)
                if self.path != "/v1/chat/completions":
                    reply = Reply(status=404, content="no such route")
                if reply.status == 200:
                    payload: dict[str, Any] = {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "test-model",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": reply.finish_reason,
                            }
                        ],
                        "usage": {"prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300},
                    }
                else:
                    message = reply.content or f"scripted error {reply.status}"
                    if reply.echo_auth:
                        message += f" (you sent {self.headers.get('Authorization')})"
                    payload = {"error": {"message": message, "type": "scripted", "code": reply.status}}
                body = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (timeout): nothing to answer
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def push(self, content: str = "", status: int = 200, times: int = 1, **kw: Any) -> None:
        """Queue ``times`` copies of a scripted reply (see `Reply`)."""
        self.script.extend(Reply(content=content, status=status, **kw) for _ in range(times))

    def close(self) -> None:
        self._release.set()  # wake delayed handlers
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    srv = ScriptedOpenAI()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="session")
def make_ctx() -> Any:
    """`make_context` as a fixture (test modules do not import conftest)."""
    return make_context


@pytest.fixture(scope="session")
def make_entry() -> Any:
    """`entry_for` as a fixture."""
    return entry_for


GSM8K_SAMPLE = Path(__file__).resolve().parents[1] / "data" / "gsm8k-sample.jsonl"
SEQUENCES = [
    {"question": f"What number comes next? {', '.join(str(a + d * i) for i in range(4))}, ?", "answer": a + d * 4}
    for a, d in [(34, 9), (16, 1), (2, 5), (7, 3), (10, 10), (3, 4), (50, 2), (1, 6), (9, 9), (20, 5)] * 3
]


@pytest.fixture
def format_suites(tmp_path: Path) -> dict[str, Any]:
    """The suites the structural operators and the tpe proposer are checked on: every built-in suite, the GSM8K
    sample and a JSONL file of number sequences (a task WHALE was not shaped for)."""
    from whale_core.suites import SuiteConfig, load_suite

    seq = tmp_path / "seq.jsonl"
    seq.write_text("".join(json.dumps(r) + "\n" for r in SEQUENCES))
    return {
        "arith": load_suite("arith"),
        "sort": load_suite("sort"),
        "gsm8k": load_suite(SuiteConfig(name="jsonl", path=str(GSM8K_SAMPLE), seed=0)),
        "sequences": load_suite(SuiteConfig(name="jsonl", path=str(seq), seed=0)),
    }
