"""The structural operators (issue 35): framing, stops, which number the parse takes, an answer prefix — valid on
every built-in suite and on a JSONL suite, blind to gold answers, deterministic, and reachable through ``mutate``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import yaml

from whale_core.harness import Harness
from whale_core.legs.harness_config import SearchConfig, make_proposer
from whale_core.proposers import FailingTrace
from whale_core.proposers.base import check_candidate
from whale_core.proposers.mutate import MutateProposer
from whale_core.proposers.structure import STRUCTURAL, frame, pick_options, template_core


def test_the_core_of_each_seed_template_and_its_framings() -> None:
    assert template_core("{{ instruction }}\n{{ a }}+{{ b }}=") == "{{ a }}+{{ b }}="
    assert template_core("{{ instruction }}\nQuestion: {{ question }}\nAnswer:") == "{{ question }}"
    assert template_core("Q: {{ q }}\nA:") == "{{ q }}"
    assert template_core("{{ instruction }}") is None  # nothing of the problem left: the framing is kept
    core = "{{ question }}"
    assert frame(core, "plain") == "{{ question | trim(' ?') }}"
    assert frame(core, "q-a") == "Q: {{ question }}\nA:"
    assert frame("{{ a }}+{{ b }}=", "plain") == "{{ a }}+{{ b }}="
    with pytest.raises(ValueError, match="unknown framing"):
        frame(core, "poem")


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_each_operator_yields_valid_renderable_harnesses_on_every_suite(
    name: str, format_suites: dict[str, Any]
) -> None:
    op = STRUCTURAL[name][0]
    for suite_name, suite in format_suites.items():
        seed = Harness.from_text(suite.seed_harness)
        problems = list(suite.problems("val"))[:3]
        applied = 0
        for i in range(25):
            spec = yaml.safe_load(seed.text)
            if not op(spec, random.Random(i)):
                continue
            applied += 1
            text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
            proposal = check_candidate(text, seed, None, proposer="mutate", parent=seed.sha)
            assert proposal.harness is not None, (name, suite_name, proposal.reason, text)
            for p in problems:
                assert proposal.harness.render(p, [])  # renders (the sandbox accepts every framing)
        assert applied > 0, (name, suite_name)


def test_plain_framing_gives_a_base_model_the_sequence_to_continue(format_suites: dict[str, Any]) -> None:
    suite = format_suites["sequences"]
    seed = Harness.from_text(suite.seed_harness)
    plain = seed.evolve(template=frame(template_core(seed.spec.template or "") or "", "plain"))
    p = next(p for split in ("train", "val", "test") for p in suite.problems(split) if "34, 43" in p.fields["question"])
    assert plain.render(p, []) == "What number comes next? 34, 43, 52, 61,"
    echo = plain.evolve(parse=[{"number": "new"}], decoding={"stop": ["\n"]})
    assert echo.parse_answer(" 34, 43, 52, 61, 70, 79", p) == "70"


def test_parse_pick_keeps_the_encodings_own_steps() -> None:
    steps = [{"remove": ","}, {"regex": "(x)"}, {"int": True}]
    spec = {"answer": {"reverse": True, "pad": 0, "sep": ","}, "parse": steps}
    for i in range(20):
        s = json.loads(json.dumps(spec))
        STRUCTURAL["parse_pick"][0](s, random.Random(i))
        assert s["parse"][0] == {"remove": ","} and {"int": True} not in s["parse"]  # int would drop reversed zeros
        assert s["parse"][1:] in pick_options()


def _ctx_with_traces(make_ctx: Any, seed: Harness, gold: str) -> Any:
    trace = FailingTrace("p1", "What number comes next? 16, 17, 18, 19,", " 16, 17", "16", gold, None)
    return make_ctx(seed, traces=[trace] * 4)


def test_structural_mutate_is_deterministic_blind_to_gold_and_uses_the_new_operators(
    seed_harness: Harness, make_ctx: Any
) -> None:
    p = make_proposer(SearchConfig(mutate_space="structural"), seed=3)
    assert isinstance(p, MutateProposer) and p.space == "structural" and "space='structural'" in repr(p)
    with_gold = p.propose(_ctx_with_traces(make_ctx, seed_harness, "20"), 40)
    withheld = p.propose(_ctx_with_traces(make_ctx, seed_harness, "<withheld>"), 40)
    again = make_proposer(SearchConfig(mutate_space="structural"), seed=3).propose(
        _ctx_with_traces(make_ctx, seed_harness, "20"), 40
    )
    shas = [x.harness.sha for x in with_gold]
    assert len(shas) == 40 and shas == [x.harness.sha for x in withheld] == [x.harness.sha for x in again]
    docs = [yaml.safe_load(x.harness.text) for x in with_gold]
    seed_doc = yaml.safe_load(seed_harness.text)
    assert any(d["template"] != seed_doc["template"] for d in docs)  # framing
    assert any(d["decoding"]["stop"] != seed_doc["decoding"]["stop"] for d in docs)  # stops
    assert any("prefix" in d for d in docs)  # prefix
    assert any(any("number" in s or "after" in s for s in d["parse"]) for d in docs)  # parse_pick
    classic = MutateProposer(seed=3).propose(_ctx_with_traces(make_ctx, seed_harness, "20"), 40)
    assert not any("prefix" in yaml.safe_load(x.harness.text) for x in classic)  # the default space is unchanged


def test_structural_operators_stay_out_of_prompt_weights_mode(seed_harness: Harness, make_ctx: Any) -> None:
    ctx = make_ctx(seed_harness, restrict_to=frozenset({"instruction"}))
    props = MutateProposer(seed=0, space="structural").propose(ctx, 10)
    assert props
    for x in props:
        assert x.harness.evolve(instruction=seed_harness.spec.instruction).sha == seed_harness.sha


def test_an_unknown_space_is_refused() -> None:
    with pytest.raises(ValueError, match="space must be one of classic, structural"):
        MutateProposer(space="everything")


def test_structural_mutate_covers_each_framing_first_once(
    format_suites: dict[str, Any], make_ctx: Any, make_entry: Any
) -> None:
    suite = format_suites["sequences"]
    seed = Harness.from_text(suite.seed_harness)
    first = MutateProposer(seed=0, space="structural").propose(make_ctx(seed), 8)
    docs = [yaml.safe_load(x.harness.text) for x in first[:4]]
    qa = "{{ instruction }}\nQuestion: {{ question }}\nAnswer:"
    assert [d["template"] for d in docs] == ["{{ question | trim(' ?') }}", qa, "Q: {{ question }}\nA:", qa]
    assert docs[0]["parse"] == [{"number": "new"}] and docs[0]["decoding"]["stop"] == ["\n"]  # a numeric parse
    assert docs[1]["fewshot"]["k"] == 3 and docs[1]["parse"] == yaml.safe_load(seed.text)["parse"]  # demos only
    assert docs[3]["prefix"].strip() == "Let's think step by step." and docs[3]["parse"] == [{"number": "last"}]
    archive = [make_entry(x.harness, status="lost") for x in first]
    again = MutateProposer(seed=0, space="structural").propose(make_ctx(seed, archive=archive), 8)
    assert not {x.harness.sha for x in again} & {x.harness.sha for x in first}  # bundles come once per archive
    assert yaml.safe_load(again[0].harness.text)["template"] == "Question: {{ question }}\nAnswer:"  # the fifth
    chat = seed.evolve(template=None, messages=[{"role": "user", "content": "{{ question }}"}])
    assert all(x.harness.is_chat for x in MutateProposer(seed=0, space="structural").propose(make_ctx(chat), 4))
