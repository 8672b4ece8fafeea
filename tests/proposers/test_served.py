"""The ``served:`` proposer end to end: WHALE starts its real proposer server on 127.0.0.1 for a local chat
model (`small_llama_dir`: random init, SmolLM2's chat template, so its replies are garbage), reaches it through
litellm, and the harness leg records every candidate as a rejection with its reason; the server is started once per
process and reused, replaced when found dead, stopped at exit and killed with its parent; a server that dies
mid-leg and a model that cannot be served give clear outcomes; the prompt fits the model's window as its own
tokenizer counts it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from whale_core.errors import WhaleError
from whale_core.harness import Harness
from whale_core.legs.harness_leg import SearchConfig, ServedConfig, make_proposer, run_harness_leg
from whale_core.proposers import FORMAT_REFERENCE, ArchiveEntry, FailingTrace, ProposalContext, ProposerUnavailable
from whale_core.proposers import serve as srv
from whale_core.proposers.serve import ProposerServerError, resolve_served_model
from whale_core.proposers.served import ServedProposer
from whale_core.records.archive import Archive
from whale_core.suites import SuiteConfig, load_suite

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite(SuiteConfig(name="arith", sizes={"train": 40, "val": 40, "test": 10}))


@pytest.fixture(scope="module")
def seed(suite: Any) -> Harness:
    return Harness.from_text(suite.seed_harness)


@pytest.fixture(scope="module")
def chat_model(small_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small Llama with a 4096-position window: its 400-token BPE vocabulary spends ~2x SmolLM2's tokens on the
    same prompt, so the compact prompt's fixed part (~1600 tokens) does not fit its own 1024 positions."""
    path = tmp_path_factory.mktemp("served") / "chat-llama"
    shutil.copytree(small_llama_dir, path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "home"))


def make_context(incumbent: Harness, traces: list[FailingTrace] | None = None) -> ProposalContext:
    entry = ArchiveEntry(incumbent.sha, incumbent.text, 0.3, 200, "incumbent", None, None, 21.0)
    description = "Integer addition: each problem gives two integers a and b; the answer is their sum, exactly."
    return ProposalContext(description, FORMAT_REFERENCE, entry, [], traces or [])


def _traces(n: int) -> list[FailingTrace]:
    return [FailingTrace(str(i), f"Add the two numbers.\n{i}+{i + 1}=", "12 + 35 = 50, " * 20, None, "47", None)
            for i in range(n)]  # fmt: skip


def _leg(policy: Any, seed: Harness, suite: Any, cfg: SearchConfig, tmp_path: Path, proposer: Any) -> Any:
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    run_id = archive.create_run("leg", "harness-only", {}).id
    res = run_harness_leg(
        policy=policy, incumbent=seed, suite=suite, cfg=cfg, archive=archive, run_id=run_id, leg_id=None,
        iteration=0, seed=0, traces_dir=tmp_path / "traces", batch_size=16, proposer=proposer,
    )  # fmt: skip
    return res, archive, run_id


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.2)
    return False


# ------------------------------------------------------------------------------------------- no server needed


def test_a_model_that_cannot_be_served_is_a_clear_error(tmp_path: Path, small_llama_dir: Path) -> None:
    with pytest.raises(ProposerServerError, match="neither a local model directory nor an installed named model"):
        make_proposer(SearchConfig(proposer=f"served:{tmp_path / 'nope'}"), 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProposerServerError, match=r"no config\.json"):
        resolve_served_model(str(tmp_path / "empty"))
    no_template = tmp_path / "no-template"
    no_template.mkdir()
    shutil.copy(small_llama_dir / "config.json", no_template)
    with pytest.raises(WhaleError, match="no chat template"):
        resolve_served_model(str(no_template))


def test_the_prompt_fits_the_window_by_the_models_own_tokenizer(chat_model: Path, seed: Harness) -> None:
    model = resolve_served_model(str(chat_model))
    context = make_context(seed, traces=_traces(40))
    roomy = ServedProposer(model, context_tokens=4000, max_tokens=300, edit="whole")
    messages, reply = roomy.messages(context, 0)
    assert reply == 300 and roomy.prompt_tokens(messages) + reply <= model.context_window
    kept_roomy = messages[1]["content"].count("- prompt ends")
    tight = ServedProposer(model, context_tokens=2200, max_tokens=300, edit="whole")
    messages, _ = tight.messages(context, 0)
    used = tight.prompt_tokens(messages)
    assert used <= 2200 + 48  # the chat template's few tokens around the two messages
    assert 0 < messages[1]["content"].count("- prompt ends") < kept_roomy
    # the request names the field to change; the incumbent is the complete example to copy
    assert "change its `" in messages[1]["content"] and seed.text.splitlines()[1] in messages[1]["content"]


def test_a_prompt_that_cannot_fit_the_window_is_never_sent(small_llama_dir: Path, seed: Harness) -> None:
    proposer = ServedProposer(resolve_served_model(str(small_llama_dir)), edit="whole")  # 1024 positions: too few
    with pytest.raises(ProposerUnavailable, match="does not fit the model's window of 1024 positions"):
        proposer.propose(make_context(seed), 2)
    assert srv.running() == []  # rejected before any server started


def test_requests_sample_seeded_and_one_candidate_each_whatever_comes_back(
    chat_model: Path, seed: Harness, server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What goes on the wire and what comes back, with the scripted server (conftest) standing in for the model's
    replies: the real server itself is exercised by the slow tests below."""
    import whale_core.proposers.served as served_mod

    monkeypatch.setattr(served_mod, "serve", lambda *a, **kw: SimpleNamespace(api_base=server.api_base))
    valid = seed.evolve(fewshot={"k": 2})
    replies = [
        "Sure! Here is a better harness: just add the numbers.",  # no block
        "```yaml\nwhale_harness: 1\nname: [oops\n```",  # invalid YAML
        f"```yaml\n{seed.text}```",  # a copy of the incumbent
        f"Changed fewshot.\n```yaml\n{valid.text}```\nThat should help.",  # valid
        f"```yaml\n{valid.text}```",  # the same again
        "```yaml\n" + "whale_harness: 1\n" * 5000,  # huge, cut off inside the block
    ]
    for reply in replies:
        server.push(reply)
    proposer = ServedProposer(resolve_served_model(str(chat_model)), temperature=0.7, max_tokens=200, edit="whole")
    out = proposer.propose(make_context(seed), len(replies))
    assert len(server.requests) == len(replies)  # one request per candidate
    reasons = [p.reason or "" for p in out]
    assert [p.status for p in out].count("valid") == 1 and out[3].sha == valid.sha
    assert "no fenced YAML block" in reasons[0] and "invalid YAML" in reasons[1] and reasons[2] == "no change"
    assert "duplicate of an earlier candidate in this leg" in reasons[4] and out[4].usage["completion_tokens"] == 300
    assert any("never closed" in r for r in reasons[5:])
    bodies = [r.body for r in server.requests]
    assert bodies[0]["model"] == str(chat_model.resolve()) and bodies[0]["max_tokens"] == 200
    config = json.loads(bodies[0]["generation_config"])  # sampling really on (see ServedProposer.sampling)
    assert config["do_sample"] is True and config["temperature"] == 0.7 and config["eos_token_id"] is not None
    assert len({b["seed"] for b in bodies}) == len(bodies)  # each request its own seed
    assert len({b["messages"][1]["content"] for b in bodies}) > 1  # each asks to change a field in turn


# ----------------------------------------------------------------------------------------- the real server


@pytest.mark.slow
def test_served_leg_never_crashes_on_garbage_and_reuses_one_server(
    chat_model: Path, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    cfg = SearchConfig(
        proposer=f"served:{chat_model}", candidates=2, rounds=[10, 20], edit="whole",
        served=ServedConfig(max_tokens=64, context_tokens=3000, timeout=120),
    )  # fmt: skip
    try:
        proposer = make_proposer(cfg, 0)
        res, archive, run_id = _leg(micro_policy, seed, suite, cfg, tmp_path / "leg1", proposer)
        (server,) = srv.running()
        assert server.ready_seconds is not None and server.model == str(chat_model.resolve())
        # a random-init model writes garbage: every request comes back as a recorded rejection with its reason
        assert len(res.candidates) >= 2 and not res.accepted and res.incumbent_out == seed
        assert all(c.status == "rejected" and c.reason for c in res.candidates)
        rows = archive.candidates(run_id)
        assert len(rows) == len(res.candidates) and all(r.status == "rejected" and r.reason for r in rows)
        assert res.proposer_usage["completion_tokens"] > 0  # the model did answer, through litellm
        assert (Path(os.environ["WHALE_HOME"]) / "proposer-server.log").is_file()

        # a second leg, with a freshly built proposer (as the flow's task builds one per leg): the same server
        again = make_proposer(cfg, 0)
        _leg(micro_policy, seed, suite, cfg, tmp_path / "leg2", again)
        assert srv.running() == [server]

        # the server dies during the leg, after the first request: the rest is one recorded rejection
        calls: list[int] = []
        complete = again._complete  # type: ignore[attr-defined]

        def die_after_first(messages: Any, **kw: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:
                server.process.kill()
                server.process.wait()
            return complete(messages, **kw)

        again._complete = die_after_first  # type: ignore[attr-defined]
        res3, _, _ = _leg(micro_policy, seed, suite, cfg, tmp_path / "leg3", again)
        assert len(calls) == 2 and res3.candidates[-1].status == "rejected"
        assert "request 2 of 2 failed" in (res3.candidates[-1].reason or "")

        # found dead at the next leg's start: started again; then it dies before the first request: the leg
        # records the proposer as unavailable and keeps the incumbent
        pids: list[int] = []

        def die_first(messages: Any, **kw: Any) -> Any:
            (current,) = srv.running()
            pids.append(current.process.pid)
            current.process.kill()
            current.process.wait()
            return complete(messages, **kw)

        again._complete = die_first  # type: ignore[attr-defined]
        res4, archive4, run4 = _leg(micro_policy, seed, suite, cfg, tmp_path / "leg4", again)
        assert pids and pids[0] != server.process.pid
        assert res4.reason.startswith("proposer unavailable") and res4.incumbent_out == seed
        assert [d.kind for d in archive4.decisions(run4)] == ["proposer-unavailable"]
    finally:
        srv.stop_all()
    assert srv.running() == [] and _gone(server.process.pid, 1)


_CHILD = """
import sys, time
from pathlib import Path
from whale_core.proposers.serve import resolve_served_model, serve
server = serve(resolve_served_model(sys.argv[1]), start_timeout=300)
print(server.process.pid, flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_the_server_ends_with_the_process_that_started_it(chat_model: Path, tmp_path: Path, end: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), WHALE_HOME=str(tmp_path / "home"))
    parent = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(chat_model), end], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        if end == "sigkill":
            assert not _gone(server_pid, 0.5)  # it was serving
            parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=60)
        assert _gone(server_pid, 30)  # atexit / PR_SET_PDEATHSIG: no orphan
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.slow
def test_a_server_that_cannot_start_says_why_quoting_its_log(small_llama_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "no-weights"
    shutil.copytree(small_llama_dir, broken, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(ProposerServerError, match=r"exited with code \d+ before it answered; its log .* ends:") as err:
        srv.serve(resolve_served_model(str(broken)), start_timeout=300)
    assert str(broken) in str(err.value)
    assert srv.running() == []


@pytest.mark.slow
def test_component_replies_from_the_real_server_parse_by_construction(
    chat_model: Path, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    """Even a random-init model writes JSON of the right shape when the server enforces the schema: every reply
    parses and has the component's keys; what fails is only what the harness validator refuses (or a reply cut
    off at max_tokens), each recorded with its reason, and the proposer's usage lands in the leg's metrics."""
    cfg = SearchConfig(
        proposer=f"served:{chat_model}", candidates=4, rounds=[10, 20], feedback_retries=0,
        served=ServedConfig(max_tokens=160, context_tokens=3000, timeout=300),
    )  # fmt: skip
    try:
        res, archive, run_id = _leg(micro_policy, seed, suite, cfg, tmp_path, make_proposer(cfg, 0))
    finally:
        srv.stop_all()
    rows = archive.candidates(run_id)
    assert len(rows) == 4
    for row in rows:
        reason = row.reason or ""
        assert "no JSON object" not in reason and "must have exactly the keys" not in reason, reason
    metrics = res.metrics()
    assert metrics["proposer_requests"] == 4 and metrics["proposer_completion_tokens"] > 0
    assert metrics["proposer_latency_s"] > 0


def test_the_server_enforces_a_schema_and_json_mode_and_refuses_what_it_cannot_compile(small_llama_dir: Path) -> None:
    """The proposer server's generator in process (no HTTP): a random-init model under a schema writes a JSON object
    the schema accepts; JSON mode an object; an unknown response_format type and a bad schema are 400s."""
    import jsonschema

    from whale_core.proposers.components import reply_schema
    from whale_core.proposers.local_server import BadRequest, Generator

    generator = Generator(small_llama_dir)
    h = Harness.from_text(load_suite(SuiteConfig(name="arith")).seed_harness)
    messages = [{"role": "user", "content": "Add the two numbers."}]
    for i, component in enumerate(["fewshot", "answer", "inference", "parse"]):
        schema = reply_schema(component, h, max_chars=40)
        fmt = {"type": "json_schema", "json_schema": {"name": component, "schema": schema}}
        body = {"messages": messages, "max_tokens": 400, "seed": i, "temperature": 1.0, "response_format": fmt}
        reply = generator.complete(body)
        (choice,) = reply["choices"]
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["message"]["content"]), schema)
        assert reply["usage"]["completion_tokens"] > 0
    reply = generator.complete({"messages": messages, "max_tokens": 300, "response_format": {"type": "json_object"}})
    text = reply["choices"][0]["message"]["content"]
    assert text.startswith("{")  # a JSON object under way; parsed whole when it ended on its own
    assert reply["choices"][0]["finish_reason"] == "length" or isinstance(json.loads(text), dict)
    with pytest.raises(BadRequest, match="not supported"):
        generator.complete({"messages": messages, "response_format": {"type": "xml"}})
    with pytest.raises(BadRequest, match="could not be compiled"):
        broken = {"type": "object", "properties": {"a": {"$ref": "#/x"}}}
        bad = {"type": "json_schema", "json_schema": {"schema": broken}}
        generator.complete({"messages": messages, "response_format": bad})
    with pytest.raises(BadRequest, match="messages"):
        generator.complete({"messages": "hi"})
