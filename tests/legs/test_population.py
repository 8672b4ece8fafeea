"""The harness population of the weights leg (`whale_core.legs.population`): the input signature that tells harnesses
apart by what the model sees, the population's members (the incumbent, then the best other val-scored harnesses,
skipping twins and poor ones) and which member renders each train problem."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.legs.population import (
    PopulationConfig,
    assign_population,
    best_val_harnesses,
    input_signature,
    population_harnesses,
    probe_of,
)
from whale_core.records.archive import Archive
from whale_core.suites import SuiteConfig, load_suite


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite(SuiteConfig(name="arith", sizes={"train": 60, "val": 30, "test": 40}))


@pytest.fixture(scope="module")
def seed_h(suite: Any) -> Harness:
    return Harness.from_text(suite.seed_harness)


def _variant(h: Harness, instruction: str) -> Harness:
    return h.evolve(instruction=instruction)


def _parse_only(h: Harness) -> Harness:
    """Same inputs to the model, another sha: one more (no-op) parse step."""
    steps = [step.model_dump(by_alias=True, exclude_none=True) for step in h.spec.parse]
    return h.evolve(parse=[*steps, {"int": True}])


def _archive_with_runs(tmp_path: Path, seed_h: Harness) -> tuple[Archive, list[Harness]]:
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    hs = [_variant(seed_h, f"Variant {i}.") for i in range(4)]
    for h in [seed_h, *hs]:
        archive.put_harness(h.sha, h.text, h.name, h.parent)
    for rid in ("r0", "r1"):
        archive.create_run(rid, "whale-fixed", {}, run_id=rid)
    ev: dict[str, Any] = {"split": "val", "completions": 10, "prompt_tokens": 10, "completion_tokens": 0}
    archive.record_evaluation("r0", hs[0].sha, "c0", subset="a", score=0.9, n=10, **ev)
    archive.record_evaluation("r0", hs[0].sha, "c0", subset="b", score=0.4, n=40, **ev)  # larger n counts
    archive.record_evaluation("r0", hs[1].sha, "c0", subset="a", score=0.6, n=10, **ev)
    archive.record_evaluation("r1", hs[2].sha, "c1", subset="a", score=0.7, n=10, **ev)
    archive.record_evaluation("r1", hs[3].sha, "c1", subset="a", score=0.2, n=10, **ev)
    archive.record_evaluation("r1", hs[3].sha, "c1", subset="t", score=0.99, n=10, **{**ev, "split": "test"})
    return archive, hs


def test_input_signature_sees_what_the_model_sees(suite: Any, seed_h: Harness) -> None:
    probe = probe_of(suite, "test", 8)
    same_inputs = _parse_only(seed_h)
    assert same_inputs.sha != seed_h.sha
    assert input_signature(same_inputs, probe) == input_signature(seed_h, probe)
    for other in (
        _variant(seed_h, "Sum."),
        seed_h.evolve(decoding={"max_new_tokens": 4}),
        seed_h.evolve(fewshot={"k": 1}),
        seed_h.evolve(inference={"samples": 3}, decoding={"temperature": 0.7}),
    ):
        assert input_signature(other, probe) != input_signature(seed_h, probe), other.diff(seed_h)
    # chat harnesses are compared on their rendered messages: no tokenizer needed
    # prompts only (what a GRPO population member contributes): sampling settings do not count
    hot = seed_h.evolve(decoding={"temperature": 0.8}, inference={"samples": 3})
    assert input_signature(hot, probe) != input_signature(seed_h, probe)
    assert input_signature(hot, probe, sampling=False) == input_signature(seed_h, probe, sampling=False)
    chat = seed_h.evolve(template=None, messages=[{"role": "user", "content": "{{ instruction }} {{ a }}+{{ b }}="}])
    assert chat.is_chat and input_signature(chat, probe) != input_signature(seed_h, probe)


def test_population_is_incumbent_then_best_others(tmp_path: Path, seed_h: Harness) -> None:
    archive, hs = _archive_with_runs(tmp_path, seed_h)
    assert population_harnesses(archive, "r0", hs[0], 0) == [hs[0]]
    pop = population_harnesses(archive, "r0", hs[0], 3)
    assert [h.sha for h in pop] == [hs[0].sha, hs[1].sha]  # only one other harness was scored in r0
    assert PopulationConfig().k == 0
    # as_of: only evaluations recorded before it count (a replayed leg sees what its first attempt saw)
    first = min(e.created for e in archive.evaluations("r0", split="val"))
    assert population_harnesses(archive, "r0", hs[0], 3, as_of=first) == [hs[0]]
    assert best_val_harnesses(archive, "r0", 5, as_of=first) == []


def test_population_skips_members_with_the_incumbents_inputs(tmp_path: Path, suite: Any, seed_h: Harness) -> None:
    archive, hs = _archive_with_runs(tmp_path, seed_h)
    twin = _parse_only(hs[0])
    hot = hs[0].evolve(decoding={"temperature": 0.8})  # trains on the incumbent's prompts too
    ev: dict[str, Any] = {"split": "val", "completions": 10, "prompt_tokens": 10, "completion_tokens": 0}
    for h, score in ((twin, 0.99), (hot, 0.98)):
        archive.put_harness(h.sha, h.text, h.name, h.parent)
        archive.record_evaluation("r0", h.sha, "c0", subset="a", score=score, n=10, **ev)
    assert [h.sha for h in population_harnesses(archive, "r0", hs[0], 2)] == [hs[0].sha, twin.sha, hot.sha]
    pop = population_harnesses(archive, "r0", hs[0], 3, probe=probe_of(suite, "train", 8))
    assert [h.sha for h in pop] == [hs[0].sha, hs[1].sha]
    # a floor relative to the incumbent's val score keeps poor harnesses out
    poor = _variant(seed_h, "Poor.")
    archive.put_harness(poor.sha, poor.text, poor.name, poor.parent)
    archive.record_evaluation("r0", poor.sha, "c0", subset="a", score=0.1, n=10, **ev)
    probe = probe_of(suite, "train", 8)
    everyone = population_harnesses(archive, "r0", hs[1], 3, probe=probe)
    assert [h.sha for h in everyone] == [hs[1].sha, twin.sha, poor.sha]  # hs[0], hot: twin's prompts
    good = population_harnesses(archive, "r0", hs[1], 3, probe=probe, min_score_ratio=0.75)
    assert [h.sha for h in good] == [hs[1].sha, twin.sha]  # 0.1 < 0.75 x 0.6
    assert PopulationConfig().min_score_ratio == 0.75


def test_assign_population_is_balanced_and_deterministic() -> None:
    ids = [f"p{i}" for i in range(100)]
    a = assign_population(ids, 3, seed=1, incumbent_weight=0.5)
    assert a == assign_population(ids, 3, seed=1, incumbent_weight=0.5)
    assert a != assign_population(ids, 3, seed=2, incumbent_weight=0.5)
    counts = Counter(a)
    assert counts[0] == 50 and counts[1] == 25 and counts[2] == 25
    assert assign_population(ids, 1, seed=0) == [0] * 100
    with pytest.raises(ValueError, match="population size"):
        assign_population(ids, 0, seed=0)
