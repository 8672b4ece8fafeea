"""`MutateProposer`: valid, distinct, deterministic, restricted in prompt-weights mode, and coherent edits."""

from __future__ import annotations

from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.proposers import MutateProposer, Proposal, changed_fields, check_candidate
from whale_core.proposers.mutate import OPERATORS, describe_encoding


def harnesses(props: list[Proposal]) -> list[Harness]:
    """The harnesses of valid proposals (asserting every proposal is valid)."""
    assert all(p.status == "valid" and p.harness is not None for p in props)
    return [p.harness for p in props if p.harness is not None]


@pytest.fixture(scope="module")
def fifty(seed_harness: Harness, make_ctx: Any) -> tuple[Harness, list[Any]]:
    return seed_harness, MutateProposer(seed=0).propose(make_ctx(seed_harness), 50)


def test_fifty_candidates_valid_and_distinct(fifty: tuple[Harness, list[Any]]) -> None:
    seed, props = fifty
    assert len(props) == 50
    shas = [h.sha for h in harnesses(props)]
    assert len(set(shas)) == 50 and seed.sha not in shas
    for p in props:
        assert p.proposer == "mutate" and p.text is not None
        assert check_candidate(p.text, seed, None).status == "valid"
        assert set(p.usage) == {"prompt_tokens", "completion_tokens", "cost_usd", "latency_s"}
    assert all(h.parent == seed.sha for h in harnesses(props))
    touched = {path.split(".")[0] for h in harnesses(props) for path in changed_fields(seed, h)}
    assert {"instruction", "answer", "fewshot", "parse"} <= touched  # several operators were exercised


def test_candidates_avoid_the_archive(seed_harness: Harness, make_ctx: Any, make_entry: Any) -> None:
    first = MutateProposer(seed=1).propose(make_ctx(seed_harness), 8)
    archive = [make_entry(h, score=0.2, status="evaluated") for h in harnesses(first)]
    archive.append(make_entry(seed_harness.evolve(instruction="x"), score=None, status="rejected", reason="bad"))
    again = MutateProposer(seed=1).propose(make_ctx(seed_harness, archive=archive), 20)
    known = {e.sha for e in archive}
    assert len(again) == 20 and not known & {h.sha for h in harnesses(again)}
    # parents come from the top of the archive, mostly the incumbent
    parents = [h.parent for h in harnesses(again)]
    assert parents.count(seed_harness.sha) >= len(parents) // 2
    assert set(parents) <= {seed_harness.sha} | known


def test_deterministic_per_seed_and_iteration(seed_harness: Harness, make_ctx: Any) -> None:
    def shas(seed: int, iteration: int) -> list[str]:
        ctx = make_ctx(seed_harness, iteration=iteration)
        return [h.sha for h in harnesses(MutateProposer(seed=seed).propose(ctx, 6))]

    assert shas(3, 0) == shas(3, 0)
    assert shas(3, 0) != shas(4, 0)
    assert shas(3, 0) != shas(3, 1)


def test_prompt_weights_mode_changes_only_instruction(seed_harness: Harness, make_ctx: Any) -> None:
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"instruction"}))
    props = MutateProposer(seed=0, max_ops=3).propose(ctx, 20)
    assert len(props) == 20
    assert all(changed_fields(seed_harness, h) == ["instruction"] for h in harnesses(props))


def test_restriction_with_no_usable_operator_gives_nothing(seed_harness: Harness, make_ctx: Any) -> None:
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"name"}))
    assert MutateProposer().propose(ctx, 5) == []


def test_edits_are_coherent(fifty: tuple[Harness, list[Any]]) -> None:
    """Generic properties, no gold knowledge: whatever the encoding, the parse pipeline reads back what the harness
    writes; the instruction describes a non-plain encoding; sampling comes with a temperature."""
    _, props = fifty
    for h in harnesses(props):
        for gold in ("7", "120", "4051", "-36"):
            assert h.parse_answer(h.encode_answer(gold) + "\n") == gold, (h.text, gold)
        a = h.spec.answer
        described = describe_encoding(a.reverse, a.pad, a.sep)
        if described and (a.pad or a.sep):  # the operator wrote this sentence (reverse alone may come from a phrase)
            assert described in h.spec.instruction, h.text
        if h.spec.inference.samples > 1:
            assert h.spec.decoding.temperature > 0, h.text


def test_answer_encoding_operator_rewrites_the_instruction(seed_harness: Harness) -> None:
    import random

    import yaml

    op, _ = OPERATORS["answer_encoding"]
    spec = yaml.safe_load(seed_harness.text)
    spec["instruction"] = "Add the two numbers. Write the answer reversed."
    rng = random.Random(0)
    for _ in range(12):
        op(spec, rng)
        a = spec["answer"]
        sentences = spec["instruction"]
        assert sentences.startswith("Add the two numbers.")
        expected = describe_encoding(a["reverse"], a["pad"], a["sep"])
        assert (expected in sentences) if expected else sentences == "Add the two numbers."
        assert "Write the answer reversed." not in sentences or expected == "Write the answer reversed."
        assert Harness.from_text(yaml.safe_dump(spec)).spec.answer.reverse == a["reverse"]


def test_max_ops_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_ops"):
        MutateProposer(max_ops=0)


# ------------------------------------------------------------------------------------------------ undo moves
def _with_origin(ctx: Any, origin: Harness) -> Any:
    import dataclasses

    return dataclasses.replace(ctx, origin=origin.text)


def test_undo_moves_put_fields_back_to_the_seed(seed_harness: Harness, make_ctx: Any) -> None:
    """An incumbent that drifted from the seed (sampling, demos, an int parse step, another instruction): the
    neighbourhood includes putting each of those back, one field at a time."""
    steps = [s.model_dump(by_alias=True, exclude_none=True) for s in seed_harness.spec.parse]
    drifted = seed_harness.evolve(
        instruction="Be exact.", fewshot={"k": 3}, decoding={"temperature": 0.8}, parse=[*steps, {"int": True}]
    )
    props = MutateProposer(seed=0, max_ops=1).propose(_with_origin(make_ctx(drifted), seed_harness), 60)
    got = harnesses(props)
    assert got[0].parent == drifted.sha
    back = {
        "temperature": any(h.spec.decoding.temperature == seed_harness.spec.decoding.temperature for h in got),
        "fewshot.k": any(h.spec.fewshot.k == seed_harness.spec.fewshot.k for h in got),
        "parse": any(h.spec.parse == seed_harness.spec.parse for h in got),
        "instruction": any(h.spec.instruction == seed_harness.spec.instruction for h in got),
    }
    assert all(back.values()), back
    # without an origin (the incumbent is the seed) the operator is not offered: no other operator writes the seed's
    # own instruction back (it is not in the phrase bank)
    plain = MutateProposer(seed=0, max_ops=1).propose(make_ctx(drifted), 60)
    assert not any(h.spec.instruction == seed_harness.spec.instruction for h in harnesses(plain))


def test_undo_in_prompt_weights_mode_touches_the_instruction_only(seed_harness: Harness, make_ctx: Any) -> None:
    drifted = seed_harness.evolve(instruction="Be exact. Do not explain.")
    ctx = _with_origin(make_ctx(drifted, restrict_to=frozenset({"instruction"})), seed_harness.evolve(
        instruction=seed_harness.spec.instruction, decoding={"temperature": 0.5}
    ))  # fmt: skip
    got = harnesses(MutateProposer(seed=2, max_ops=1).propose(ctx, 40))
    assert all(set(changed_fields(drifted, h)) <= {"instruction"} for h in got)
    assert any(h.spec.instruction == seed_harness.spec.instruction for h in got)
