"""A hostile user's matrix against the real CLI (issue 30): what a proposer, a file or a user hands WHALE is printed
literally, bounded on arrival and refused with one line — never a hang, a traceback or a stored secret.

Three families, each a list of cases run as ``whale`` subprocesses in a fresh home on the micro model:

- **printed fields**: a proposer's reply whose harness names, instructions and prose hold Rich markup, terminal
  escapes (CSI, OSC, C1), bell/backspace/carriage return and bidirectional overrides: ``whale search`` prints them as
  visible escapes and exits 0;
- **hostile servers** (real HTTP servers on 127.0.0.1, standing in for a paid provider API): a slow-loris, an endless
  body, a 10 MB reply, 20,000 fenced blocks, HTTP 500s, a non-JSON body: the leg ends within its deadline with the
  incumbent kept or the bounded candidates scored, exit 0;
- **special files** for every path option (``--config``, ``--harness``, ``--data``, ``--set harness=``) and command:
  a FIFO, a character device, a directory: one ``error:`` line, exit 2, in seconds.

Every case asserts: no traceback, no hang (a subprocess timeout), no raw control character on stdout or stderr, and
the planted API key in no file under the home. The test prints the totals the issue's closing note reports.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = ["[/bold]x[red]", "\x1b[31mred\x1b[0m", "\x1b]0;owned\x07", "\x9b2J", "a\rb\x08c\x07", "\u202eevil"]


class Hostile:
    """An OpenAI-compatible server that misbehaves as told (``mode``), on 127.0.0.1."""

    def __init__(self) -> None:
        self.mode, self.body = "ok", ""
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    outer.answer(self)
                except OSError:  # the client gave up
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        if self.mode in ("slow-loris", "endless"):
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            if self.mode == "slow-loris":
                h.send_header("Content-Length", "1000000")
            h.end_headers()
            while not self.stop.wait(0.5 if self.mode == "slow-loris" else 0.01):
                h.wfile.write(b" " if self.mode == "slow-loris" else b"x" * 65536)
                h.wfile.flush()
            return
        if self.mode == "http-500":
            status, body = 500, b'{"error": {"message": "boom", "type": "server_error"}}'
        elif self.mode == "not-json":
            status, body = 200, b"<html>\x1b[31m not json"
        else:
            import json

            choice = {"index": 0, "message": {"role": "assistant", "content": self.body}, "finish_reason": "stop"}
            payload = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}  # fmt: skip
            status, body = 200, json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    srv = Hostile()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def key() -> str:
    return "sk-WHALE-HOSTILE-" + secrets.token_hex(12)


def _whale(home: Path, key: str, *args: str, timeout: float = 180) -> tuple[int | None, str, str, float]:
    """(exit code, stdout, stderr, seconds); exit code None when it hung past ``timeout``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), COLUMNS="200", OPENAI_API_KEY=key)
    start = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "whale_cli", *args], env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=timeout, check=False, errors="surrogateescape")  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else str(exc.stdout or "")
        return None, out, "", time.monotonic() - start
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def _secret_hits(home: Path, key: str) -> list[str]:
    return [str(p) for p in home.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


def _block(name: str, instruction: str) -> str:
    text = f"whale_harness: 1\nname: {name!r}\ninstruction: {instruction!r}\ntemplate: '{{{{ a }}}}+{{{{ b }}}}='\n"
    return f"```yaml\n{text}```"


def test_hostile_matrix(tmp_path: Path, micro_model_dir: Path, hostile: Hostile, key: str) -> None:
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    home = tmp_path / "home"
    search = ["search", "--model", str(micro_model_dir), "--suite", "arith", "-k", "2", "--proposer", "openai/m",
              "--api-base", hostile.api_base, "--set", "search.num_retries=0", "--set", "search.timeout=3",
              "--set", "search.rounds=[16,40]", "--set", "suite.sizes={train: 200, val: 60, test: 60}"]  # fmt: skip

    def case(label: str, args: list[str], want_rc: int, limit: float, needle: str | None = None) -> None:
        rc, out, err, took = _whale(home, key, *args, timeout=limit + 60)
        problems = []
        if rc is None:
            problems.append("hung")
        elif rc != want_rc:
            problems.append(f"rc {rc} != {want_rc}")
        if "Traceback" in out + err:
            problems.append("traceback")
        if RAW_CONTROL.search(out + err):
            problems.append(f"raw control character {RAW_CONTROL.search(out + err).group()!r}")  # type: ignore[union-attr]
        if took > limit:
            problems.append(f"took {took:.0f} s > {limit:.0f} s")
        if needle is not None and needle not in out + err:
            problems.append(f"{needle!r} not in the output")
        outcomes["cases"] += 1
        outcomes[f"exit {rc}"] += 1
        if problems:
            failures.append(f"{label}: {', '.join(problems)}\n{(out + err)[-1500:]}")

    # -- printed fields: every hostile string as a harness name, an instruction and the reply's prose
    for i, s in enumerate(HOSTILE):
        hostile.mode, hostile.body = "ok", f"prose {s}\n{_block(s, 'Add.')}\n{_block(f'n{i}', s)}\n"
        case(f"printed field {s!r}", search, 0, 120, "rejected: ")
    # -- hostile servers: the leg ends within its deadline (timeout x (num_retries + 1) = 3 s), the run goes on
    many = "\n".join(_block(f"b{i}", "Add.") for i in range(20_000))
    for mode, body in [("slow-loris", ""), ("endless", ""), ("http-500", ""), ("not-json", ""),
                       ("ok", "x" * 10_000_000), ("ok", many)]:  # fmt: skip
        hostile.mode, hostile.body = mode, body
        label = mode if mode != "ok" else ("huge reply" if body.startswith("x") else "20,000 blocks")
        case(f"server {label}", search, 0, 150)
    hostile.mode = "ok"
    # -- special files for every path option and command that takes it: one line, exit 2, at once
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    specials = {"FIFO": str(fifo), "device": "/dev/zero", "directory": str(tmp_path)}
    for kind, path in specials.items():
        for args in (["run", "--config", path], ["eval", "--harness", path, "-n", "1"], ["search", "--harness", path],
                     ["train", "--harness", path], ["run", "--set", f"harness={path}"],
                     ["eval", "--suite", "jsonl", "--data", path, "-n", "1"],
                     ["search", "--suite", "jsonl", "--data", path]):  # fmt: skip
            case(f"{kind} as {args[0]} {args[1]}", [*args, "--model", str(micro_model_dir)], 2, 90,
                 "not a regular file")  # fmt: skip
    outcomes["secrets found"] = len(_secret_hits(home, key))
    print("HOSTILE MATRIX", dict(outcomes))
    assert not failures, "\n\n".join(failures)
    assert outcomes["secrets found"] == 0
