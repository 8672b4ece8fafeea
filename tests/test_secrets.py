"""Planted-sentinel secrets test: a real `whale run` with the `llm` proposer never writes its API key anywhere.

The run (the flow tests' SMALL config, the tiny model) uses litellm's ``openai/`` provider against a real local
OpenAI-compatible HTTP server on 127.0.0.1 (the proposer tests' `ScriptedOpenAI`: it stands in for the paid API),
with ``OPENAI_API_KEY`` set to a random sentinel. The server makes the key travel as far as it can: the first
request is answered 401 with the request's ``Authorization`` header echoed in the error body; the next replies
echo the key in their prose and inside a candidate harness's instruction. Then every regular file under
``WHALE_HOME`` (SQLite databases and their WAL files read as bytes, MLflow artifacts, the Prefect database and
logs, traces, the report) and the console output are scanned for the sentinel, as text and as its base64 and
hex forms: 0 hits are required.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest

from tests.flows.flow_helpers import SMALL, make_home, whale
from tests.proposers.conftest import ScriptedOpenAI
from whale_core.harness import Harness
from whale_core.suites.registry import SuiteConfig, load_suite

pytestmark = pytest.mark.slow


def _reply(seed: Harness, key: str, i: int) -> str:
    a = seed.evolve(instruction=f"Add the two numbers. (Proposal {i}; the operator's key is {key}.)")
    b = seed.evolve(answer={"reverse": True}, instruction=f"Add the two numbers, answer reversed ({i}).")
    c = seed.evolve(fewshot={"k": 2 + i % 3})
    blocks = "\n\n".join(f"```yaml\n{h.text}```" for h in (a, b, c))
    return f"Your request was signed with Bearer {key}; here are three candidates.\n\n{blocks}\n"


def _needles(key: str) -> list[bytes]:
    raw = key.encode()
    return [raw, base64.b64encode(raw)[:24], raw.hex().encode(), key[len("sk-") :].encode()]


def test_whale_run_with_llm_proposer_writes_the_key_nowhere(tmp_path: Path, tiny_model_dir: Path) -> None:
    key = "sk-WHALE-SENTINEL-" + secrets.token_hex(12)
    seed = Harness.from_text(load_suite(SuiteConfig(name="arith", seed=0)).seed_harness)
    server = ScriptedOpenAI()
    try:
        server.push(status=401, content="invalid api key", echo_auth=True)
        for i in range(6):
            server.push(_reply(seed, key, i))
        env = make_home(tmp_path, tiny_model_dir.parent)
        env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
        env["OPENAI_API_KEY"] = key
        sets = [*SMALL, "search.proposer=openai/test-model", f"search.api_base={server.api_base}",
                "search.num_retries=0", "search.timeout=30"]  # fmt: skip
        args = [a for item in sets for a in ("--set", item)]
        res = whale(env, "run", "--run-id", "secrets", *args)
    finally:
        server.close()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    authorized = [r for r in server.requests if r.headers.get("authorization") == f"Bearer {key}"]
    assert len(authorized) >= 2, "the proposer did not reach the server with the key"  # the key did travel
    assert server.requests[0].path == "/v1/chat/completions"

    home = Path(env["WHALE_HOME"])
    needles = _needles(key)
    hits: list[str] = []
    scanned = 0
    for path in sorted(home.rglob("*")):
        if path.is_symlink() or not path.is_file():  # models/ links to the shared tiny model: not this run's output
            continue
        scanned += 1
        data = path.read_bytes()
        hits += [f"{path.relative_to(home)} ({n[:12]!r})" for n in needles if n in data]
    console = (res.stdout + res.stderr).encode()
    hits += [f"console ({n[:12]!r})" for n in needles if n in console]
    print(f"\nsecrets: scanned {scanned} files under WHALE_HOME + the console, {len(hits)} hits")
    assert scanned >= 20, f"only {scanned} files: the run wrote less than expected"
    assert any(p.suffix == ".db" for p in home.rglob("*.db")), "no database was scanned"
    assert hits == [], hits
    assert "[redacted]" in _all_text(home), "the echoed key should have been replaced by [redacted] somewhere"


def _all_text(home: Path) -> str:
    chunks = []
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
            chunks.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)
