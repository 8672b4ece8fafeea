"""`check_candidate`: the one validity gate every proposer uses, and the format reference."""

from __future__ import annotations

from whale_core.harness import Harness
from whale_core.proposers import (
    FORMAT_REFERENCE,
    LLMProposer,
    MutateProposer,
    Proposer,
    changed_fields,
    check_candidate,
)


def test_valid_candidate_is_canonical_and_records_parent(seed_harness: Harness) -> None:
    edited = seed_harness.text.replace("k: 2", "k: 3")
    prop = check_candidate(edited, seed_harness, None, proposer="t")
    assert prop.status == "valid" and prop.reason is None
    assert prop.harness is not None and prop.harness.spec.fewshot.k == 3
    assert prop.text == prop.harness.text and prop.sha == prop.harness.sha
    assert prop.harness.parent == seed_harness.sha
    assert changed_fields(seed_harness, prop.harness) == ["fewshot.k"]


def test_invalid_candidate_rejected_with_field_reason(seed_harness: Harness) -> None:
    prop = check_candidate(seed_harness.text + "temperature: 0.5\n", seed_harness, None)
    assert prop.status == "rejected" and prop.harness is None
    assert prop.reason is not None and "unknown key 'temperature'" in prop.reason
    assert prop.text is not None and prop.text.endswith("temperature: 0.5\n")  # the raw text is kept
    broken = check_candidate("whale_harness: 1\nname: [unclosed\n", seed_harness, None)
    assert broken.status == "rejected" and "invalid YAML" in (broken.reason or "")


def test_identical_or_reformatted_is_no_change(seed_harness: Harness) -> None:
    assert check_candidate(seed_harness.text, seed_harness, None).reason == "no change"
    reformatted = "# same harness, other layout\n" + seed_harness.text.replace("k: 2", "k:    2")
    assert check_candidate(reformatted, seed_harness, None).reason == "no change"


def test_restriction_names_changed_fields(seed_harness: Harness) -> None:
    only_instruction = frozenset({"instruction"})
    text = seed_harness.evolve(answer={"reverse": True}, instruction="Write the sum reversed.").text
    prop = check_candidate(text, seed_harness, only_instruction)
    assert prop.status == "rejected"
    assert prop.reason == "prompt-weights mode: only 'instruction' may change; changed: answer.reverse"
    allowed = check_candidate(seed_harness.evolve(instruction="Add them.").text, seed_harness, only_instruction)
    assert allowed.status == "valid"
    renamed = check_candidate(seed_harness.evolve(name="other").text, seed_harness, only_instruction)
    assert renamed.status == "rejected" and renamed.reason is not None and renamed.reason.endswith("changed: name")


def test_format_reference_documents_every_field() -> None:
    for word in ("whale_harness", "instruction", "template", "messages", "fewshot", "answer", "reverse", "pad",
                 "sep", "parse", "regex", "strip", "remove", "first_line", "int", "decoding", "temperature",
                 "max_new_tokens", "stop", "inference", "samples", "aggregate", "majority"):  # fmt: skip
        assert word in FORMAT_REFERENCE, word


def test_format_reference_example_is_a_valid_harness() -> None:
    # The annotated example (text mode; the chat-mode lines are the alternative) must itself parse.
    lines = [line.split("  #")[0].rstrip() for line in FORMAT_REFERENCE.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("whale_harness"))
    end = next(i for i, line in enumerate(lines) if line.startswith("inference"))
    body = [line for line in lines[start : end + 1] if line.strip()]
    messages = next(i for i, line in enumerate(body) if line.startswith("messages"))
    text = "\n".join(body[:messages] + body[messages + 3 :]) + "\n"
    h = Harness.from_text(text)
    assert h.spec.fewshot.k == 2 and h.spec.parse[1].step == ("strip", True)


def test_both_proposers_satisfy_the_protocol() -> None:
    assert isinstance(MutateProposer(), Proposer)
    assert isinstance(LLMProposer("openai/test-model"), Proposer)
