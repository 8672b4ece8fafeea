"""Harness components for one-at-a-time LLM edits (`whale_core.proposers.components`), the lenient JSON reading
(`whale_core.proposers.replies`) and the component prompt: every component's schema admits its current value and
the values the harness validator accepts; a merged reply changes only its component; a required change excludes
exactly the current value; the selector reads the traces; near-JSON is repaired, prose is not invented into JSON."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from whale_core.harness import Harness
from whale_core.proposers import FailingTrace
from whale_core.proposers.components import (
    COMPONENTS,
    check_shape,
    component_value,
    merge,
    pivots,
    reply_schema,
    require_change,
    select_components,
)
from whale_core.proposers.context import build_component_messages
from whale_core.proposers.replies import read_json, response_format

CHAT = """\
whale_harness: 1
name: chat-sum
instruction: Add the two numbers.
messages:
  - {role: system, content: "{{ instruction }}"}
  - {role: user, content: "{{ a }}+{{ b }}="}
fewshot: {k: 1}
"""


@pytest.mark.parametrize("chat", [False, True])
def test_each_schema_admits_the_current_value_and_the_merge_round_trips(seed_harness: Harness, chat: bool) -> None:
    h = Harness.from_text(CHAT) if chat else seed_harness
    for name in COMPONENTS:
        value = component_value(name, h)
        jsonschema.validate(value, reply_schema(name, h, max_chars=4000))
        assert check_shape(name, h, value) is None
        again = Harness.from_text(merge(name, h, value, rename=False))
        assert again.sha == h.sha  # the current value merged back is the same harness
    assert list(component_value("prompt", h)) == (["messages", "prefix"] if chat else ["template", "prefix"])


def test_a_merged_value_changes_its_component_only(seed_harness: Harness) -> None:
    merged = Harness.from_text(merge("answer", seed_harness, {"answer": {"reverse": True, "pad": 3, "sep": ","}}))
    old, new = (json.loads(json.dumps(h.spec.model_dump())) for h in (seed_harness, merged))
    assert {key for key in old if old[key] != new[key]} == {"name", "answer"}
    assert merged.name == "plain-sum.answer"
    long = seed_harness.evolve(name="x" * 75)
    assert len(Harness.from_text(merge("fewshot", long, component_value("fewshot", long))).name) <= 80


def test_shape_errors_name_the_keys(seed_harness: Harness) -> None:
    assert "not an object" in str(check_shape("fewshot", seed_harness, [1, 2]))
    reason = str(check_shape("fewshot", seed_harness, {"fewshot": {}, "k": 3}))
    assert "exactly the keys 'fewshot'" in reason and "unexpected 'k'" in reason
    assert "missing 'template'" in str(check_shape("prompt", seed_harness, {"prefix": ""}))
    assert check_shape("prompt", seed_harness, {"template": "{{ a }}"}) is None  # prefix may be left out


def test_a_required_change_excludes_exactly_the_current_value(seed_harness: Harness) -> None:
    for name in COMPONENTS:
        current = component_value(name, seed_harness)
        for pivot in pivots(name, seed_harness):
            schema = require_change(reply_schema(name, seed_harness, 300), seed_harness, pivot)
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(current, schema)
    # what it admits: any other value of that setting, the rest free
    schema = require_change(reply_schema("fewshot", seed_harness, 300), seed_harness, "fewshot.k")
    jsonschema.validate({"fewshot": {"k": 5, "select": "random", "separator": "\n"}}, schema)
    schema = require_change(reply_schema("instruction", seed_harness, 300), seed_harness, "instruction")
    jsonschema.validate({"instruction": "Add the two numbers and write only the sum."}, schema)
    # a separator the validator refuses is outside the schema too
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"answer": {"reverse": True, "pad": 0, "sep": "10"}}, reply_schema("answer", seed_harness))


def _trace(completion: str, parsed: str | None, gold: str) -> FailingTrace:
    return FailingTrace("p", "1+2=", completion, parsed, gold, None if parsed is not None else "no match")


def test_the_selector_reads_the_traces_and_respects_the_mode(make_ctx: Any, seed_harness: Harness) -> None:
    missed = [_trace("The answer is 3", None, "3"), _trace("It is 3.", "1", "3")]
    wrong = [_trace("4", "4", "3"), _trace("5", "5", "3")]
    assert select_components(make_ctx(seed_harness, traces=missed), 3) == ["parse", "decoding", "prompt"]
    assert select_components(make_ctx(seed_harness, traces=wrong), 3) == ["instruction", "fewshot", "prompt"]
    every = select_components(make_ctx(seed_harness, traces=wrong), 9)
    assert set(every) == set(COMPONENTS) and every[7:] == every[:2]  # all reached, then round again
    rotated = {tuple(select_components(make_ctx(seed_harness, seed=s), 7, "round-robin")) for s in range(5)}
    assert len(rotated) > 1 and all(sorted(r) == sorted(COMPONENTS) for r in rotated)
    prompt_only = make_ctx(seed_harness, traces=missed, restrict_to=frozenset({"instruction"}))
    assert select_components(prompt_only, 3) == ["instruction"] * 3


def test_read_json_is_lenient_but_never_invents_an_object() -> None:
    assert read_json('{"k": 1}').value == {"k": 1}
    fenced = read_json('Sure!\n```json\n{"k": 2}\n```\nDone.')
    assert fenced.value == {"k": 2} and fenced.how == "fenced"
    assert read_json('I propose {"k": 3} as the value.').how == "span"
    repaired = read_json("```json\n{'k': 4, 'select': 'first',}\n```")
    assert repaired.value == {"k": 4, "select": "first"} and repaired.how == "repaired"
    assert read_json('{"instruction": "Add them.", "k": 5').value == {"instruction": "Add them.", "k": 5}
    for prose in ["", "I would change the instruction to be clearer.", "[1, 2, 3]"]:
        reading = read_json(prose)
        assert reading.value is None and reading.problem
    assert response_format("fenced", "x", {}) is None and response_format("json", "x", {}) == {"type": "json_object"}


def test_the_component_prompt_shows_history_of_that_component_and_fits_its_budget(
    make_ctx: Any, make_entry: Any, seed_harness: Harness
) -> None:
    better = seed_harness.evolve(fewshot={"k": 4})
    other = seed_harness.evolve(instruction="Sum them.")
    archive = [
        make_entry(better, score=0.41, status="evaluated"),
        make_entry(other, score=0.35, status="evaluated"),
        make_entry(seed_harness, score=None, status="rejected", reason="fewshot: duplicate of the incumbent"),
    ]
    traces = [_trace(f"{i} apples", None, str(i)) for i in range(60)]
    ctx = make_ctx(seed_harness, archive=archive, traces=traces)
    current = json.dumps(component_value("fewshot", seed_harness))
    messages = build_component_messages(ctx, "fewshot", current, COMPONENTS["fewshot"].form, False, 900, pivot="k")
    text = messages[1]["content"]
    assert current in text and '"k": 4' in text and "score 0.410" in text
    assert "Sum them." not in text  # another component's history is not this one's
    assert "fewshot: duplicate of the incumbent" in text and "change `k` at least" in text
    assert 0 < text.count("apples") < 60  # traces trimmed to the budget
    assert sum(len(m["content"]) for m in messages) / 3 <= 900 + 40
    fenced = build_component_messages(ctx, "fewshot", current, "", True, 900)[1]["content"]
    assert "inside one ```json block" in fenced
