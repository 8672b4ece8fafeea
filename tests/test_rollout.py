"""`rollout()`: batching equivalence, failure isolation, aggregation, token counts, sampling seeds, traces JSONL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.rollout import RolloutResult, aggregate, rollout
from whale_core.suites import load_suite
from whale_core.suites.base import Problem

REVERSED = """\
whale_harness: 1
name: rev
instruction: Add the two numbers. Write the sum reversed.
template: "{{ instruction }}\\n{{ a }}+{{ b }}="
fewshot: {k: 1}
answer: {reverse: true}
parse: [{regex: '^\\s*(-?[0-9]+)'}]
decoding: {temperature: 0.0, max_new_tokens: 8, stop: ["\\n"]}
"""


@pytest.fixture(scope="module")
def arith() -> Any:
    return load_suite("arith")


@pytest.fixture(scope="module")
def rev() -> Harness:
    return Harness.from_text(REVERSED)


@pytest.fixture(scope="module")
def problems(arith: Any) -> list[Problem]:
    """48 val problems of 1-2 digits (where the tiny model is right often enough to make comparisons bite)."""
    return [p for p in arith.problems("val") if p.meta["digits"] <= 2][:48]


def _key(r: RolloutResult) -> list[tuple[Any, ...]]:
    return [(t.problem_id, t.prompt, t.completions, t.answer, t.score, t.prompt_tokens) for t in r.traces]


def test_batched_equals_one_at_a_time_under_greedy(tiny_policy: Any, rev: Harness, arith: Any, problems: list) -> None:
    batched = rollout(tiny_policy, rev, arith, problems, batch_size=16)
    single = rollout(tiny_policy, rev, arith, problems, batch_size=1)
    assert _key(batched) == _key(single)
    assert [t.problem_id for t in batched.traces] == [p.id for p in problems]  # input order kept
    assert 0.0 < batched.score < 1.0  # the tiny model is weak but not at 0 on this format
    assert batched.n == 48 and batched.completions == 48 and batched.harness_sha == rev.sha
    assert batched.policy_id == tiny_policy.policy_id and batched.split == "val"


def test_demos_come_from_the_pool_and_follow_the_seed(tiny_policy: Any, rev: Harness, arith: Any) -> None:
    pool = list(arith.problems("train")[:5])
    probs = list(arith.problems("val")[:4])
    r = rollout(tiny_policy, rev, arith, probs, demo_pool=pool, seed=3)
    demo_lines = {f"{d.fields['a']}+{d.fields['b']}={d.answer[::-1]}" for d in pool}
    for t in r.traces:
        assert t.prompt.splitlines()[1] in demo_lines
    again = rollout(tiny_policy, rev, arith, probs, demo_pool=pool, seed=3)
    assert [t.prompt for t in again.traces] == [t.prompt for t in r.traces]


def test_failure_isolation(micro_policy: Any, arith: Any, problems: list) -> None:
    h = Harness.from_text(REVERSED).evolve(fewshot={"k": 0})
    broken = Problem("broken", {"a": "12"}, "12", {})  # no field `b`
    mixed = [*problems[:5], broken, *problems[5:10]]
    r = rollout(micro_policy, h, arith, mixed, batch_size=4)
    bad = r.traces[5]
    assert bad.problem_id == "broken" and bad.score == 0.0 and bad.completions == []
    assert bad.error is not None and bad.error.startswith("render:") and "'b'" in bad.error
    assert bad.prompt_tokens == 0 and bad.completion_tokens == 0
    alone = rollout(micro_policy, h, arith, problems[:10], batch_size=4)
    assert _key(alone) == [k for i, k in enumerate(_key(r)) if i != 5]
    assert r.completions == 10  # nothing generated for the broken problem


def test_unparsable_completion_scores_zero(tiny_policy: Any, arith: Any, problems: list) -> None:
    h = Harness.from_text(REVERSED).evolve(parse=[{"regex": "^NEVER([0-9]+)"}])
    r = rollout(tiny_policy, h, arith, problems[:8])
    assert r.score == 0.0
    for t in r.traces:
        assert t.answer is None and t.parsed == [None] and t.score == 0.0 and t.sample_scores == [0.0]
        assert t.error is not None and t.error.startswith("parse:")
        assert len(t.completions) == 1


def test_number_new_skips_the_problems_own_numbers(tiny_policy: Any, arith: Any, problems: list) -> None:
    from whale_core.harness.parse import echoed_numbers

    h = Harness.from_text(REVERSED).evolve(parse=[{"number": "new"}], answer={"reverse": False})
    r = rollout(tiny_policy, h, arith, problems[:8])
    for p, t in zip(problems[:8], r.traces, strict=True):
        echoed = echoed_numbers(p.fields.values())
        assert echoed  # every arith problem writes its operands
        if t.answer is None:
            assert t.error is not None and "not in the problem" in t.error
        else:
            assert t.answer not in echoed, (p.fields, t.completions)


class _FlakyScorer:
    """The arith suite, but its scorer raises on one problem."""

    def __init__(self, inner: Any, bad_id: str) -> None:
        self.inner, self.bad_id = inner, bad_id
        self.name, self.description, self.seed_harness = inner.name, inner.description, inner.seed_harness

    def problems(self, split: str) -> Sequence[Problem]:
        return self.inner.problems(split)  # type: ignore[no-any-return]

    def score(self, answer: str | None, problem: Problem) -> float:
        if problem.id == self.bad_id:
            raise ZeroDivisionError("scorer bug")
        return self.inner.score(answer, problem)  # type: ignore[no-any-return]


def test_scorer_exception_scores_zero_for_that_problem(tiny_policy: Any, rev: Harness, arith: Any) -> None:
    probs = list(arith.problems("val")[:6])
    r = rollout(tiny_policy, rev, _FlakyScorer(arith, probs[2].id), probs)
    assert r.traces[2].score == 0.0 and "ZeroDivisionError: scorer bug" in (r.traces[2].error or "")
    ok = rollout(tiny_policy, rev, arith, probs)
    assert [t.score for i, t in enumerate(r.traces) if i != 2] == [t.score for i, t in enumerate(ok.traces) if i != 2]


def test_prompt_too_long_is_a_per_problem_error(micro_policy: Any, arith: Any, problems: list) -> None:
    long = Problem("long", {"a": "1" * 300, "b": "2"}, "1", {})
    h = Harness.from_text(REVERSED).evolve(fewshot={"k": 0})
    r = rollout(micro_policy, h, arith, [problems[0], long])
    assert r.traces[1].error is not None and "prompt too long" in r.traces[1].error
    assert r.traces[0].error is None or r.traces[0].error.startswith("parse:")


def test_aggregate() -> None:
    assert aggregate(["1", "2", "2", None], "majority") == "2"
    assert aggregate(["3", "4", None, "4", "3"], "majority") == "3"  # tie -> first seen
    assert aggregate([None, "7"], "majority") == "7"
    assert aggregate([None, None], "majority") is None
    assert aggregate([None, "7"], "first") is None
    assert aggregate(["5", "7"], "first") == "5"
    with pytest.raises(ValueError, match="unknown aggregate 'mean'"):
        aggregate(["1"], "mean")


def test_sampling_with_majority_vote_is_seeded(tiny_policy: Any, rev: Harness, arith: Any, problems: list) -> None:
    h = rev.evolve(decoding={"temperature": 1.0}, inference={"samples": 5, "aggregate": "majority"})
    probs = problems[:12]
    seen: list[list[int]] = []
    r = rollout(tiny_policy, h, arith, probs, batch_size=16, seed=7, progress=lambda d, t: seen.append([d, t]))
    assert r.completions == 60 and seen[-1] == [60, 60] and len(seen) == 4
    for t, p in zip(r.traces, probs, strict=True):
        assert len(t.completions) == len(t.parsed) == len(t.sample_scores) == 5
        assert t.answer == aggregate(t.parsed, "majority")
        assert t.score == arith.score(t.answer, p)
        assert t.sample_scores == [arith.score(a, p) if a is not None else 0.0 for a in t.parsed]
    again = rollout(tiny_policy, h, arith, probs, batch_size=16, seed=7)
    assert [t.completions for t in again.traces] == [t.completions for t in r.traces]
    other = rollout(tiny_policy, h, arith, probs, batch_size=16, seed=8)
    assert [t.completions for t in other.traces] != [t.completions for t in r.traces]
    assert len({c for t in r.traces for c in t.completions}) > 12  # samples differ within problems


def test_greedy_samples_generate_once(tiny_policy: Any, rev: Harness, arith: Any, problems: list) -> None:
    h = rev.evolve(inference={"samples": 3})
    r = rollout(tiny_policy, h, arith, problems[:6])
    assert r.completions == 6
    for t in r.traces:
        assert len(t.completions) == 3 and len(set(t.completions)) == 1


def test_token_counts_are_consistent(tiny_policy: Any, rev: Harness, arith: Any, problems: list) -> None:
    tok = tiny_policy.tokenizer
    r = rollout(tiny_policy, rev, arith, problems[:16])
    for t in r.traces:
        assert t.prompt_tokens == len(tok(t.prompt).input_ids)  # char-level + BOS: len(prompt) + 1
        assert t.prompt_tokens == len(t.prompt) + 1
        # a completion is its characters plus the EOS/stop token that ended it (none when it hit max_new_tokens)
        assert len(t.completions[0]) <= t.completion_tokens <= min(len(t.completions[0]) + 1, 8)
    assert r.prompt_tokens == sum(t.prompt_tokens for t in r.traces)
    assert r.completion_tokens == sum(t.completion_tokens for t in r.traces)
    assert r.seconds > 0


def test_chat_mode_uses_the_chat_template_once(tiny_policy: Any, arith: Any, problems: list) -> None:
    h = Harness.from_text(REVERSED).evolve(
        messages=[{"role": "system", "content": "{{ instruction }}"}, {"role": "user", "content": "{{ a }}+{{ b }}="}]
    )
    text = Harness.from_text(REVERSED)
    chat = rollout(tiny_policy, h, arith, problems[:16], seed=1)
    plain = rollout(tiny_policy, text.evolve(fewshot={"k": 0}), arith, problems[:16], seed=1)
    tok = tiny_policy.tokenizer
    for t in chat.traces:
        assert t.prompt.startswith("<bos>Add the two numbers. Write the sum reversed.\n")
        assert t.prompt_tokens == len(tok(t.prompt, add_special_tokens=False).input_ids)  # no second BOS
    # with one demo the chat prompt is the text prompt minus the repeated instruction
    k0 = rollout(tiny_policy, h.evolve(fewshot={"k": 0}), arith, problems[:16], seed=1)
    assert [t.prompt for t in k0.traces] == ["<bos>" + t.prompt for t in plain.traces]
    assert [t.completions for t in k0.traces] == [t.completions for t in plain.traces]
    assert chat.n == 16


def test_write_jsonl(tmp_path: Path, tiny_policy: Any, rev: Harness, arith: Any, problems: list) -> None:
    r = rollout(tiny_policy, rev, arith, problems[:5], split="test")
    path = r.write_jsonl(tmp_path / "sub" / "traces.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 5
    for row, t in zip(rows, r.traces, strict=True):
        assert row.pop("harness_sha") == rev.sha and row.pop("policy_id") == tiny_policy.policy_id
        assert row.pop("split") == "test"
        assert row == asdict(t)
    summary = r.summary()
    assert "traces" not in summary and summary["n"] == 5 and summary["score"] == r.score
    assert r.scores == [t.score for t in r.traces]


def test_empty_problem_list(micro_policy: Any, rev: Harness, arith: Any) -> None:
    r = rollout(micro_policy, rev, arith, [])
    assert r.n == 0 and r.score == 0.0 and r.traces == [] and r.completions == 0
    with pytest.raises(ValueError, match="batch_size"):
        rollout(micro_policy, rev, arith, [], batch_size=0)
