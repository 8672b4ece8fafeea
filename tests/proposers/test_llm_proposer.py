"""`LLMProposer` through litellm against a real local HTTP server speaking the OpenAI chat-completions API.

The scripted server (see conftest) replaces a paid provider API — the only place where one is replaced by a local
server. The requests go through litellm and the OpenAI SDK over real sockets, so timeouts, retries, rate limits and
the request body are the real ones.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.proposers import FailingTrace, LLMProposer, Proposal, ProposerUnavailable
from whale_core.proposers.context import estimate_tokens

KEY_ENV = "WHALE_TEST_PROPOSER_KEY"


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = "sk-whale-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    return key


def proposer(server: Any, **kw: Any) -> LLMProposer:
    kw.setdefault("timeout", 10)
    kw.setdefault("num_retries", 0)
    return LLMProposer("openai/test-model", api_base=server.api_base, api_key_env=KEY_ENV, **kw)


def fence(text: str, tag: str = "yaml") -> str:
    return f"```{tag}\n{text.rstrip()}\n```"


def assert_no_key(key: str, *things: Any) -> None:
    for thing in things:
        assert key not in repr(thing) and key not in str(thing), thing


def mixed_reply(seed: Harness) -> str:
    valid_a = seed.evolve(answer={"reverse": True}, instruction="Add the two numbers. Write the answer reversed.")
    valid_b = seed.evolve(fewshot={"k": 4})
    unknown_key = seed.text + "temperature: 0.3\n"
    unsafe = seed.text.replace("{{ instruction }}", "{{ ''.__class__.__mro__ }}")
    return "\n\n".join(
        [
            "Here are my proposals. First, reversing the answer often helps small models:",
            fence(valid_a.text),
            "Second, a bare fence with more demos:",
            fence(valid_b.text, tag=""),
            "Third (malformed):",
            fence("whale_harness: 1\nname: [oops\ninstruction: 'unclosed\n"),
            "Fourth:",
            fence(unknown_key, tag="yml"),
            "Fifth:",
            fence(unsafe),
            "Some python that is not a candidate:\n```python\nprint('hi')\n```\nThat's all!",
        ]
    )


def test_mixed_reply_valid_and_rejected_with_reasons(
    server: Any, api_key: str, seed_harness: Harness, make_ctx: Any
) -> None:
    server.push(mixed_reply(seed_harness))
    props = proposer(server).propose(make_ctx(seed_harness), k=5)
    assert len(server.requests) == 1 and server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == f"Bearer {api_key}"  # the key from api_key_env was used
    valid = [p.harness for p in props if p.harness is not None]
    rejected = [p for p in props if p.status == "rejected"]
    assert [h.spec.answer.reverse for h in valid] == [True, False]
    assert valid[1].spec.fewshot.k == 4
    assert all(h.parent == seed_harness.sha for h in valid)
    reasons = [p.reason or "" for p in rejected]
    assert len(rejected) == 3
    assert "invalid YAML" in reasons[0]
    assert "unknown key 'temperature'" in reasons[1]
    assert "template" in reasons[2] and "_" in reasons[2]
    assert all(p.proposer == "llm:openai/test-model" for p in props)
    # usage: the call's tokens split over its proposals; cost unknown for this model -> 0.0
    assert sum(p.usage["prompt_tokens"] for p in props) == pytest.approx(1000)
    assert sum(p.usage["completion_tokens"] for p in props) == pytest.approx(300)
    assert all(p.usage["cost_usd"] == 0.0 and p.usage["latency_s"] >= 0 for p in props)
    assert_no_key(api_key, *props)


def test_duplicates_extra_and_truncated_blocks(server: Any, api_key: str, seed_harness: Harness, make_ctx: Any,
                                               make_entry: Any) -> None:  # fmt: skip
    old = seed_harness.evolve(fewshot={"k": 0})
    new_a, new_b = seed_harness.evolve(fewshot={"k": 1}), seed_harness.evolve(fewshot={"k": 3})
    reply = "\n".join(
        [
            *(fence(h.text) for h in (seed_harness, old, new_a, new_a, new_b)),
            "```yaml\nwhale_harness: 1\nname: cut-off",
        ]
    )
    server.push(reply)
    ctx = make_ctx(seed_harness, archive=[make_entry(old, score=0.1, status="evaluated")])
    props = proposer(server).propose(ctx, k=1)
    assert [p.status for p in props] == ["rejected", "rejected", "valid", "rejected", "rejected", "rejected"]
    assert [p.reason for p in props][:2] == [
        "no change",
        f"duplicate of archive entry {old.sha[:12]} (status: evaluated)",
    ]
    assert "earlier candidate" in (props[3].reason or "")
    assert "more than k=1" in (props[4].reason or "")
    assert "never closed" in (props[5].reason or "") and props[5].text is None


def test_reply_without_blocks_is_one_rejection(server: Any, api_key: str, seed_harness: Harness, make_ctx: Any) -> None:
    server.push("I would suggest reversing the answer, but I cannot write YAML today.")
    props = proposer(server).propose(make_ctx(seed_harness), k=3)
    assert len(props) == 1 and props[0].status == "rejected" and "no fenced YAML block" in (props[0].reason or "")
    assert props[0].usage["completion_tokens"] == 300


def test_http_500_then_success_is_retried(server: Any, api_key: str, seed_harness: Harness, make_ctx: Any) -> None:
    server.push(status=500)
    server.push(fence(seed_harness.evolve(fewshot={"k": 3}).text))
    props = proposer(server, num_retries=2).propose(make_ctx(seed_harness), k=2)
    assert len(server.requests) == 2
    assert [p.status for p in props] == ["valid"]


def test_http_429_then_success_is_retried(server: Any, api_key: str, seed_harness: Harness, make_ctx: Any) -> None:
    server.push(status=429, headers={"Retry-After": "0"})
    server.push(fence(seed_harness.evolve(name="x").text))
    props = proposer(server, num_retries=1).propose(make_ctx(seed_harness), k=1)
    assert len(server.requests) == 2 and props[0].harness is not None and props[0].harness.name == "x"


def test_persistent_errors_raise_unavailable_without_the_key(
    server: Any, api_key: str, seed_harness: Harness, make_ctx: Any
) -> None:
    server.push(status=429, times=6, echo_auth=True, headers={"Retry-After": "0"})
    with pytest.raises(ProposerUnavailable) as info:
        proposer(server, num_retries=1).propose(make_ctx(seed_harness), k=1)
    message = str(info.value)
    assert "openai/test-model" in message and "RateLimitError" in message
    assert "[redacted]" in message  # the server echoed the key: it was scrubbed
    assert 2 <= len(server.requests) <= 3  # litellm's retries ran, then gave up
    assert info.value.__cause__ is None and info.value.__context__ is None  # no chained exception holding the key
    assert_no_key(api_key, info.value, repr(info.value))


def test_slow_reply_times_out_cleanly(server: Any, api_key: str, seed_harness: Harness, make_ctx: Any) -> None:
    server.push("late", times=4, delay=60.0)
    start = time.monotonic()
    with pytest.raises(ProposerUnavailable, match="Timeout") as info:
        proposer(server, timeout=1, num_retries=1).propose(make_ctx(seed_harness), k=1)
    elapsed = time.monotonic() - start
    assert elapsed < 45  # bounded by timeout x attempts, far below the server's 60 s delay
    assert 2 <= len(server.requests) <= 3
    assert_no_key(api_key, info.value)


def test_missing_key_env_is_unavailable_before_any_request(
    server: Any, seed_harness: Harness, make_ctx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ProposerUnavailable, match=KEY_ENV):
        proposer(server).propose(make_ctx(seed_harness), k=1)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    default = LLMProposer("openai/test-model", api_base=server.api_base, timeout=5, num_retries=0)
    with pytest.raises(ProposerUnavailable, match="OPENAI_API_KEY"):
        default.propose(make_ctx(seed_harness), k=1)
    assert server.requests == []


def test_request_has_context_within_budget_and_no_key(
    server: Any, api_key: str, seed_harness: Harness, make_ctx: Any, make_entry: Any
) -> None:
    archive = [
        make_entry(seed_harness.evolve(fewshot={"k": k}, decoding={"max_new_tokens": t}), score=0.01 * (k + t),
                   status="evaluated") for k in range(5) if k != 2 for t in (4, 16, 32, 64)
    ]  # fmt: skip
    archive.append(make_entry(seed_harness.evolve(name="r"), score=None, status="rejected", reason="REASON-MARKER"))
    huge = "12+34=46\n" * 20_000
    traces = [
        FailingTrace(f"val-{i}", huge + f"{i}+1=", "x" * 50_000, None, str(i + 1), "could not parse an answer")
        for i in range(30)
    ] + [FailingTrace("val-small", "9+9=", "17", "17", "18", None)]
    server.push(f"the key is {api_key}\n" + fence(seed_harness.evolve(fewshot={"k": 1}).text))
    budget = 3000
    props = proposer(server, context_tokens=budget).propose(make_ctx(seed_harness, archive, traces), k=2)
    body = server.requests[0].body
    sent = "\n".join(m["content"] for m in body["messages"])
    assert estimate_tokens(sent) <= budget  # the budget holds although the traces alone are ~10 MB
    assert len(server.requests[0].raw) < budget * 4 * 1.2  # the bytes on the wire too (JSON escaping aside)
    assert body["max_tokens"] == 2000 and body["model"] == "test-model"
    assert "val-small" in sent and "gold answer: '18'" in sent  # short traces survive
    assert "more left out for length" in sent
    best = max(archive[:-1], key=lambda e: e.score or 0)
    assert best.sha[:12] in sent  # the best prior candidate is shown
    assert "Harness format" in sent and seed_harness.text.splitlines()[2] in sent  # format ref + incumbent kept
    assert api_key not in server.requests[0].raw.decode()
    assert [p.status for p in props] == ["valid"]
    assert_no_key(api_key, *props)


def test_no_key_in_records_even_if_the_model_echoes_it(
    server: Any, api_key: str, seed_harness: Harness, make_ctx: Any
) -> None:
    leaky = seed_harness.text.replace("Add the two numbers.", f"Use key {api_key}.")
    server.push(f"My key: {api_key}\n" + fence(leaky) + "\n" + fence(f"whale_harness: 1\nkey: {api_key}"))
    prop = proposer(server)
    props = prop.propose(make_ctx(seed_harness), k=2)
    assert props and all(isinstance(p, Proposal) for p in props)
    assert_no_key(api_key, prop, *props, *(p.text for p in props), *(p.reason for p in props))
    assert any("[redacted]" in (p.text or "") for p in props)
    assert_no_key(api_key, json.dumps([p.usage for p in props]))
