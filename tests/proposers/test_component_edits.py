"""The component-edit path of the LLM proposer (`whale_core.proposers.edits`) against the scripted OpenAI-compatible
server (conftest: a real HTTP server on 127.0.0.1 standing in for a paid provider API): the schema sent as
``response_format``, the step down to JSON mode and to a fenced block when the provider refuses, the lenient
reading, the error fed back once with its reason (and charged), a reply cut off at ``max_tokens`` never adopted,
and the run's proposer budget stopping the requests."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.proposers import FailingTrace
from whale_core.proposers.llm import LLMProposer
from whale_core.proposers.spend import ProposerBudgetSpent

KEY_ENV = "WHALE_TEST_COMPONENT_KEY"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = "sk-whale-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    return key


def proposer(server: Any, **kw: Any) -> LLMProposer:
    kw.setdefault("edit", "component")
    kw.setdefault("selector", "round-robin")
    return LLMProposer(
        "openai/test-model", api_base=server.api_base, num_retries=0, timeout=20, api_key_env=KEY_ENV, **kw
    )


def missed(n: int) -> list[FailingTrace]:
    """Failing traces whose completion holds the right answer that the parse missed."""
    return [FailingTrace(f"p{i}", f"{i}+1=", f"The answer is {i + 1}.", None, str(i + 1), "no match") for i in range(n)]


def test_a_schema_reply_is_merged_into_the_incumbent_and_nothing_else_changes(
    server: Any, seed_harness: Harness, make_ctx: Any
) -> None:
    server.push(json.dumps({"parse": [{"after": "answer is"}, {"number": "first"}]}))
    (prop,) = proposer(server, selector="traces").propose(make_ctx(seed_harness, traces=missed(2)), 1)
    body = server.requests[0].body
    # the traces show answers the parse missed: the parse is asked for first, its schema as response_format
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["parse"]
    assert "The answer is 1." in body["messages"][1]["content"]  # the failing traces are shown
    assert prop.status == "valid" and prop.harness is not None and prop.usage["requests"] == 1
    assert [s.step for s in prop.harness.spec.parse] == [("after", "answer is"), ("number", "first")]
    assert prop.harness.name == "plain-sum.parse"
    old, new = (json.loads(json.dumps(h.spec.model_dump())) for h in (seed_harness, prop.harness))
    assert {key for key in old if old[key] != new[key]} == {"name", "parse"}  # merged: the rest is the incumbent's


def test_each_component_gets_its_own_schema_and_the_prompt_shows_its_current_value(
    server: Any, seed_harness: Harness, make_ctx: Any
) -> None:
    proposer(server, feedback_retries=0).propose(make_ctx(seed_harness), 7)
    asked = [r.body["response_format"]["json_schema"]["schema"]["required"] for r in server.requests]
    assert sorted(map(tuple, asked)) == sorted(
        [("instruction",), ("template", "prefix"), ("fewshot",), ("answer",), ("parse",), ("decoding",),
         ("inference",)]
    )  # fmt: skip
    prompt = next(r.body["messages"][1]["content"] for r in server.requests if r.body["response_format"]
                  ["json_schema"]["schema"]["required"] == ["fewshot"])  # fmt: skip
    assert '{"fewshot": {"k": 2, "select": "random", "separator": "\\n"}}' in prompt
    assert "score 0.300 on 200 problems" in prompt


def test_refused_schema_steps_down_to_json_mode_then_to_a_fenced_block(
    server: Any, seed_harness: Harness, make_ctx: Any
) -> None:
    value = {"instruction": "Add the two numbers. Reply with the sum only."}
    server.refuse_formats = {"json_schema"}
    server.push(json.dumps(value))
    p = proposer(server, selector="round-robin")
    ctx = make_ctx(seed_harness.evolve(parse=[{"regex": r"(-?[0-9]+)"}]), restrict_to=frozenset({"instruction"}))
    (prop,) = p.propose(ctx, 1)
    kinds = [(r.body.get("response_format") or {}).get("type") for r in server.requests]
    assert kinds == ["json_schema", "json_object"] and p.mode == "json"
    assert prop.status == "valid" and prop.usage["fallbacks"] == 1 and prop.usage["requests"] == 1
    assert prop.harness is not None and prop.harness.spec.instruction == value["instruction"]
    assert prop.harness.name == ctx.incumbent.text.split("name: ", 1)[1].split("\n", 1)[0]  # restricted: not renamed

    server.requests.clear()
    server.refuse_formats = {"json_schema", "json_object"}
    server.push("Here you go:\n```json\n{'instruction': 'Sum the two numbers, digits only.',}\n```")
    p = proposer(server)  # a new proposer (as each leg builds one) starts where this endpoint's last one ended
    (prop,) = p.propose(ctx, 1)
    kinds = [(r.body.get("response_format") or {}).get("type") for r in server.requests]
    assert kinds == ["json_object", None] and p.mode == "fenced"
    assert "```json block" in server.requests[-1].body["messages"][1]["content"]
    # near-JSON (single quotes, a trailing comma) repaired by json-repair, counted, and used
    assert prop.status == "valid" and prop.usage["repaired"] == 1 and prop.usage["fallbacks"] == 1
    assert prop.harness is not None and prop.harness.spec.instruction == "Sum the two numbers, digits only."

    # a mode chosen by the user is not stepped down: the refusal makes the proposer unavailable
    server.requests.clear()
    from whale_core.proposers import ProposerUnavailable

    with pytest.raises(ProposerUnavailable, match="refused"):
        proposer(server, output="schema").propose(ctx, 1)
    assert len(server.requests) == 1


def test_a_rejected_reply_is_fed_back_once_with_its_reason_and_both_requests_are_charged(
    server: Any, seed_harness: Harness, make_ctx: Any
) -> None:
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"instruction"}))
    server.push(json.dumps({"instruction": seed_harness.spec.instruction}))  # no change
    server.push(json.dumps({"instruction": "Add them. Write only the sum."}))
    (prop,) = proposer(server).propose(ctx, 1)
    assert prop.status == "valid" and prop.usage["requests"] == 2 and prop.usage["retries"] == 1
    assert prop.usage["prompt_tokens"] == 2000 and prop.usage["completion_tokens"] == 600  # both charged
    retry = server.requests[1].body["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2]["content"] == json.dumps({"instruction": seed_harness.spec.instruction})
    assert "That reply was rejected: the value is the same as the current one" in retry[3]["content"]

    # rejected twice: the candidate is rejected with the last reason; one feedback round only
    server.requests.clear()
    server.push("I think the instruction is fine.")
    server.push(json.dumps({"instruction": 42}))
    (prop,) = proposer(server).propose(ctx, 1)
    assert len(server.requests) == 2 and prop.status == "rejected"
    assert prop.reason is not None and prop.reason.startswith("instruction: ") and "instruction" in prop.reason[13:]
    assert "no JSON object found" in server.requests[1].body["messages"][3]["content"]
    assert prop.usage["requests"] == 2 and prop.usage["retries"] == 1

    # the retry itself fails (the provider is down): the candidate is rejected, its first request still charged
    server.requests.clear()
    server.push("still not JSON")
    server.push(status=500)
    (prop,) = proposer(server).propose(ctx, 1)
    assert prop.status == "rejected" and "(the retry failed: " in (prop.reason or "")
    assert prop.usage["requests"] == 1 and prop.usage["prompt_tokens"] == 1000

    # feedback_retries=0: no second request
    server.requests.clear()
    server.push(json.dumps({"wrong_key": "x"}))
    (prop,) = proposer(server, feedback_retries=0).propose(ctx, 1)
    assert len(server.requests) == 1 and prop.status == "rejected"
    assert "exactly the keys 'instruction'" in (prop.reason or "") and "unexpected 'wrong_key'" in (prop.reason or "")


def test_a_reply_cut_off_at_max_tokens_is_never_adopted(server: Any, seed_harness: Harness, make_ctx: Any) -> None:
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"instruction"}))
    complete = json.dumps({"instruction": "Add the two numbers; answer with digits."})
    server.push(complete, finish_reason="length")  # parses, but the provider says it was cut off
    server.push(complete, finish_reason="length")
    (prop,) = proposer(server).propose(ctx, 1)
    assert prop.status == "rejected" and "cut off" in (prop.reason or "") and "never adopted" in (prop.reason or "")
    assert prop.usage["truncated"] == 2 and prop.usage["requests"] == 2
    assert "write less" in server.requests[1].body["messages"][3]["content"]
    # whole-harness mode: a cut-off reply adopts none of its blocks, complete ones included
    server.requests.clear()
    block = "```yaml\n" + seed_harness.evolve(fewshot={"k": 1}).text + "```"
    server.push(block, finish_reason="length")
    (prop,) = proposer(server, edit="whole").propose(ctx, 2)
    assert prop.status == "rejected" and "no candidate of a cut-off reply is adopted" in (prop.reason or "")


def test_the_proposer_budget_stops_requests_and_counts_the_runs_earlier_spend(
    server: Any, seed_harness: Harness, make_ctx: Any
) -> None:
    from dataclasses import replace

    values = [{"instruction": f"Add the two numbers, variant {i}."} for i in range(4)]
    for value in values:
        server.push(json.dumps(value))
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"instruction"}))
    # each scripted request costs 1,300 tokens: 2,600 allowed → two requests, then a rejection that says why
    out = proposer(server, budget_tokens=2600).propose(ctx, 4)
    assert len(server.requests) == 2 and [p.status for p in out] == ["valid", "valid", "rejected"]
    assert "proposer budget spent: 2,600 of 2,600 tokens" in (out[-1].reason or "")
    # what earlier legs spent counts: 2,000 before → one request; then nothing left → the leg cannot start
    server.requests.clear()
    before = replace(ctx, proposer_spent={"prompt_tokens": 1500.0, "completion_tokens": 500.0})
    out = proposer(server, budget_tokens=2600).propose(before, 4)
    assert len(server.requests) == 1 and out[0].status == "valid"
    spent = replace(ctx, proposer_spent={"prompt_tokens": 2000.0, "completion_tokens": 600.0})
    with pytest.raises(ProposerBudgetSpent, match="2,600 of 2,600 tokens"):
        proposer(server, budget_tokens=2600).propose(spent, 4)
    with pytest.raises(ProposerBudgetSpent, match=r"search\.proposer_budget\.usd"):
        proposer(server, edit="whole", budget_usd=0.01).propose(replace(ctx, proposer_spent={"cost_usd": 0.02}), 2)
    assert len(server.requests) == 1
