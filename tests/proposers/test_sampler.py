"""The `tpe` proposer (issue 35): Optuna's TPE over the structural space — valid on every built-in suite and a JSONL
suite, a harness and a point map to each other, deterministic for a seed, blind to gold answers, its memory is the
archive (a fresh proposer resumes where the last one was), and told scores it concentrates where they were high."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from whale_core.harness import Harness
from whale_core.legs.harness_config import SearchConfig, make_proposer
from whale_core.proposers import FailingTrace
from whale_core.proposers.sampler import SPACE, TPEProposer, build, describe


def test_make_proposer_names_it() -> None:
    p = make_proposer(SearchConfig(proposer="tpe"), seed=4)
    assert isinstance(p, TPEProposer) and p.seed == 4 and p.name == "tpe"
    with pytest.raises(ValueError, match="'tpe'"):
        make_proposer(SearchConfig(proposer="tp"), seed=0)
    with pytest.raises(ValueError, match="n_startup must be >= 1"):
        TPEProposer(n_startup=0)


def test_every_proposal_is_valid_renders_and_maps_back_to_its_point(
    format_suites: dict[str, Any], make_ctx: Any
) -> None:
    for name, suite in format_suites.items():
        seed = Harness.from_text(suite.seed_harness)
        origin = yaml.safe_load(seed.text)
        props = TPEProposer(seed=1).propose(make_ctx(seed), 12)
        assert len(props) == 12, name
        assert len({p.harness.sha for p in props}) == 12 and seed.sha not in {p.harness.sha for p in props}
        problems = list(suite.problems("val"))[:2]
        for p in props:
            assert p.status == "valid" and p.proposer == "tpe" and p.harness.parent == seed.sha
            for problem in problems:
                assert p.harness.render(problem, [])
            point = describe(origin, p.harness)
            assert point is not None, (name, p.harness.text)  # every proposal lies in the space, coverage included
            assert all(point[d] in SPACE[d] for d in SPACE)
            assert Harness.from_text(yaml.safe_dump(build(origin, point))).sha == p.harness.sha


def test_a_harness_outside_the_space_has_no_point(seed_harness: Harness) -> None:
    origin = yaml.safe_load(seed_harness.text)
    assert describe(origin, seed_harness) is not None  # the seed itself is a point ("keep" everything)
    assert describe(origin, seed_harness.evolve(instruction="Something else.")) is None
    assert describe(origin, seed_harness.evolve(decoding={"max_new_tokens": 77})) is None


def _ctx_with_traces(make_ctx: Any, seed: Harness, gold: str, **kw: Any) -> Any:
    trace = FailingTrace("p1", "What number comes next? 16, 17, 18, 19,", " 16, 17", "16", gold, None)
    return make_ctx(seed, traces=[trace] * 4, **kw)


def _scored_archive(seed: Harness, make_ctx: Any, make_entry: Any, n: int = 24) -> list[Any]:
    """``n`` points drawn by a first proposer, scored 0.9 when the framing is plain and 0.1 otherwise."""
    origin = yaml.safe_load(seed.text)
    out, rng_seed = [], 100
    while len(out) < n:
        for p in TPEProposer(seed=rng_seed).propose(make_ctx(seed), 8):
            point = describe(origin, p.harness)
            assert point is not None
            out.append(make_entry(p.harness, score=0.9 if point["framing"] == "plain" else 0.1, status="lost"))
        rng_seed += 1
    return out[:n]


def test_deterministic_blind_to_gold_and_resumed_from_the_archive(
    seed_harness: Harness, make_ctx: Any, make_entry: Any
) -> None:
    archive = _scored_archive(seed_harness, make_ctx, make_entry)
    a = TPEProposer(seed=3).propose(_ctx_with_traces(make_ctx, seed_harness, "20", archive=archive), 8)
    b = TPEProposer(seed=3).propose(_ctx_with_traces(make_ctx, seed_harness, "<withheld>", archive=archive), 8)
    assert [x.harness.sha for x in a] == [x.harness.sha for x in b]  # same seed, gold withheld: same proposals
    shuffled = list(reversed(archive))  # the archive's order does not matter, only its contents
    c = TPEProposer(seed=3).propose(_ctx_with_traces(make_ctx, seed_harness, "20", archive=shuffled), 8)
    assert [x.harness.sha for x in a] == [x.harness.sha for x in c]
    d = TPEProposer(seed=4).propose(_ctx_with_traces(make_ctx, seed_harness, "20", archive=archive), 8)
    assert [x.harness.sha for x in a] != [x.harness.sha for x in d]


def test_told_the_scores_it_concentrates_where_they_were_high(
    seed_harness: Harness, make_ctx: Any, make_entry: Any
) -> None:
    origin = yaml.safe_load(seed_harness.text)
    archive = _scored_archive(seed_harness, make_ctx, make_entry)
    told = TPEProposer(seed=5).history(make_ctx(seed_harness, archive=archive))
    assert len(told) == len(archive)  # every scored point is a trial
    plain_before = sum(point["framing"] == "plain" for point, _ in told) / len(told)
    props = TPEProposer(seed=5).propose(make_ctx(seed_harness, archive=archive), 16)
    framings = Counter(describe(origin, p.harness)["framing"] for p in props)  # type: ignore[index]
    assert framings["plain"] / len(props) >= max(0.5, 2 * plain_before), (framings, plain_before)


def test_startup_covers_the_framings_first(format_suites: dict[str, Any], make_ctx: Any) -> None:
    suite = format_suites["sequences"]
    seed = Harness.from_text(suite.seed_harness)
    first = TPEProposer(seed=0).propose(make_ctx(seed), 8)
    docs = [yaml.safe_load(x.harness.text) for x in first[:4]]
    qa = "{{ instruction }}\nQuestion: {{ question }}\nAnswer:"
    assert [d["template"] for d in docs] == ["{{ question | trim(' ?') }}", qa, "Q: {{ question }}\nA:", qa]
    assert docs[1]["fewshot"]["k"] == 3 and "prefix" in docs[3]


def test_prompt_weights_mode_gets_nothing(seed_harness: Harness, make_ctx: Any) -> None:
    assert TPEProposer().propose(make_ctx(seed_harness, restrict_to=frozenset({"instruction"})), 8) == []
    assert TPEProposer().propose(make_ctx(seed_harness), 0) == []
