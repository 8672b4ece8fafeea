"""`run_harness_leg` end to end: the `llm` proposer through litellm against the scripted local OpenAI-compatible
server (tests/proposers/conftest.py; it stands in for a paid provider API) on the micro model, with every rejection
recorded in the archive and a dead or slow proposer ending the leg cleanly; and the acceptance rule at leg level, with
constructed per-problem scores (a truly better candidate is accepted, a noise-only one is not) and the prompt-weights
restriction enforced even against a proposer that ignores it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.legs.harness_leg import SearchConfig, run_harness_leg
from whale_core.legs.scoring import ScoreBlock, validation_order
from whale_core.proposers import Proposal, ProposalContext
from whale_core.records.archive import Archive
from whale_core.suites import SuiteConfig, load_suite

KEY_ENV = "WHALE_TEST_PROPOSER_KEY"


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite(SuiteConfig(name="arith", sizes={"train": 40, "val": 40, "test": 10}))


@pytest.fixture(scope="module")
def seed(suite: Any) -> Harness:
    return Harness.from_text(suite.seed_harness)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = "sk-whale-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    return key


def _fence(text: str) -> str:
    return f"```yaml\n{text.rstrip()}\n```"


def _archive(tmp_path: Path) -> tuple[Archive, str]:
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    return archive, archive.create_run("leg", "harness-only", {}).id


def _llm_cfg(server: Any, **kw: Any) -> SearchConfig:
    return SearchConfig(
        proposer="openai/test-model", api_base=server.api_base, api_key_env=KEY_ENV, candidates=4,
        rounds=[10, 20], num_retries=0, **kw,
    )  # fmt: skip


def _leg(policy: Any, seed: Harness, suite: Any, cfg: SearchConfig, tmp_path: Path, **kw: Any) -> Any:
    archive, run_id = _archive(tmp_path)
    res = run_harness_leg(
        policy=policy, incumbent=seed, suite=suite, cfg=cfg, archive=archive, run_id=run_id, leg_id=None,
        iteration=0, seed=0, traces_dir=tmp_path / "traces", batch_size=16, **kw,
    )  # fmt: skip
    return res, archive, run_id


def test_llm_leg_completes_and_records_every_rejection(
    server: Any, api_key: str, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    valid_a = seed.evolve(fewshot={"k": 1})
    valid_b = seed.evolve(instruction="Add the two numbers. Reply with the sum only.")
    server.push(
        "\n\n".join(
            [
                "Four ideas:",
                _fence(valid_a.text),
                _fence("whale_harness: 1\nname: [oops\n"),  # malformed YAML
                _fence(seed.text + "temperature: 0.3\n"),  # unknown top-level key
                _fence(valid_b.text),
                _fence(seed.text),  # no change
            ]
        )
    )
    res, archive, run_id = _leg(micro_policy, seed, suite, _llm_cfg(server), tmp_path)
    rejected = [c for c in res.candidates if c.status == "rejected"]
    assert len(rejected) == 3 and all(c.reason for c in rejected)
    reasons = " | ".join(c.reason or "" for c in rejected)
    assert "invalid YAML" in reasons and "unknown key 'temperature'" in reasons and "no change" in reasons
    scored = {c.sha for c in res.candidates if c.status in ("accepted", "lost")}
    assert scored == {valid_a.sha, valid_b.sha}
    # the archive holds every candidate with its status and reason; the texts of the rejected ones are kept
    rows = archive.candidates(run_id)
    assert sorted(r.status for r in rows) == sorted(["rejected"] * 3 + [c.status for c in res.candidates
                                                                          if c.sha in scored])  # fmt: skip
    assert all(r.reason for r in rows if r.status == "rejected")
    assert any(r.text and "oops" in r.text for r in rows if r.status == "rejected")
    # what the proposer saw: the incumbent's failing traces (the micro model fails most sums)
    body = str(server.requests[0].body)
    assert "Add the two numbers." in body and "gold" in body.lower()
    # rollouts counted: the incumbent on 20 problems, each valid candidate on at least the first round
    assert res.completions >= 20 + 2 * 10
    assert res.proposer_usage["prompt_tokens"] == pytest.approx(1000)
    # each stored evaluation counts the completion tokens its traces hold (was always 0)
    for ev in archive.evaluations(run_id):
        traces = [json.loads(line) for line in Path(ev.traces_path).read_text().splitlines()]
        assert ev.completion_tokens == sum(t["completion_tokens"] for t in traces) > 0
    # the key never reaches the archive
    assert api_key not in (tmp_path / "a.db").read_bytes().decode("latin-1")


def test_llm_leg_survives_http_500(
    server: Any, api_key: str, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    server.push(status=500, times=3)
    res, archive, run_id = _leg(micro_policy, seed, suite, _llm_cfg(server), tmp_path)
    assert not res.accepted and res.incumbent_out == seed
    assert res.reason.startswith("proposer unavailable") and api_key not in res.reason
    assert [d.kind for d in archive.decisions(run_id)] == ["proposer-unavailable"]


def test_llm_leg_survives_a_reply_slower_than_the_timeout(
    server: Any, api_key: str, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    server.push(_fence(seed.evolve(fewshot={"k": 1}).text), delay=30)
    res, archive, run_id = _leg(micro_policy, seed, suite, _llm_cfg(server, timeout=1.0), tmp_path)
    assert not res.accepted and res.reason.startswith("proposer unavailable")
    assert archive.candidates(run_id) == []


# ----------------------------------------------------------------------------- acceptance, constructed scores
class Scripted:
    """A proposer returning fixed harnesses, marked valid without any check (a careless custom proposer)."""

    def __init__(self, harnesses: list[Harness]) -> None:
        self.harnesses = harnesses

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        return [Proposal(h.text, h, "valid", None, "scripted") for h in self.harnesses[:k]]


def _constructed(suite: Any, table: dict[str, list[float]]) -> Any:
    """A ``roll_many`` that returns the per-problem scores in ``table`` (by harness sha or name) for each slice."""
    n = len(validation_order(suite, 0))

    def roll_many(jobs: list[tuple[Harness, int, int]]) -> list[ScoreBlock]:
        out = []
        for h, i, j in jobs:
            scores = table.get(h.sha, table.get(h.name, []))[:n][i:j]
            traces = [{"problem_id": f"p{k}", "prompt": "x", "completions": ["1"], "answer": "1", "gold": "2",
                       "error": None, "score": s} for k, s in enumerate(scores, start=i)]  # fmt: skip
            out.append(ScoreBlock(scores, [10] * len(scores), len(scores), traces))
        return out

    return roll_many


def test_leg_accepts_a_true_gain_and_rejects_a_noise_only_one(suite: Any, seed: Harness, tmp_path: Path) -> None:
    base = [1.0 if k % 10 < 3 else 0.0 for k in range(40)]  # 0.30
    better = [1.0 if k % 10 < 7 else 0.0 for k in range(40)]  # 0.70 on the same problems
    noise = list(base)
    for k in (3, 13, 23):  # 3 gains, 2 losses: +0.025, well inside the noise
        noise[k] = 1.0
    noise[0] = noise[10] = 0.0
    cfg = SearchConfig(candidates=2, rounds=[20, 40])
    h_better = seed.evolve(name="better", instruction="Sum them.")
    h_noise = seed.evolve(name="noise", instruction="Add them.")
    table = {seed.name: base, "better": better, "noise": noise}

    res, archive, run_id = _leg(None, seed, suite, cfg, tmp_path, proposer=Scripted([h_noise]),
                                roll_many=_constructed(suite, table), policy_id="p0")  # fmt: skip
    assert not res.accepted and res.incumbent_out == seed
    assert res.paired is not None and res.paired.delta == pytest.approx(0.025)
    assert [d.kind for d in archive.decisions(run_id)] == ["reject"]

    res, archive, run_id = _leg(None, seed, suite, cfg, tmp_path / "b", proposer=Scripted([h_noise, h_better]),
                                roll_many=_constructed(suite, table), policy_id="p0")  # fmt: skip
    assert res.accepted and res.incumbent_out == h_better
    assert res.incumbent_score == pytest.approx(0.3) and res.winner_score == pytest.approx(0.7)
    status = {c.sha: c.status for c in res.candidates}
    assert status[h_better.sha] == "accepted" and status[h_noise.sha] == "lost"
    assert [d.kind for d in archive.decisions(run_id)] == ["accept"]


def test_prompt_weights_restriction_is_enforced_by_the_leg(suite: Any, seed: Harness, tmp_path: Path) -> None:
    only_instruction = seed.evolve(instruction="Sum them.")
    outside = seed.evolve(answer={"reverse": True})
    table = {seed.sha: [0.0] * 40, only_instruction.sha: [1.0] * 40, outside.sha: [1.0] * 40}
    res, archive, run_id = _leg(
        None, seed, suite, SearchConfig(candidates=2, rounds=[20, 40]), tmp_path,
        proposer=Scripted([outside, only_instruction]), roll_many=_constructed(suite, table), policy_id="p0",
        restrict_to=frozenset({"instruction"}),
    )  # fmt: skip
    by_sha = {c.sha: c for c in res.candidates}
    assert by_sha[outside.sha].status == "rejected"
    assert "prompt-weights mode" in (by_sha[outside.sha].reason or "")
    assert "answer.reverse" in (by_sha[outside.sha].reason or "")
    assert res.accepted and res.incumbent_out == only_instruction
    assert {r.status for r in archive.candidates(run_id)} == {"rejected", "accepted"}


def test_a_budget_spent_before_any_candidate_was_scored_ends_the_leg_cleanly(
    suite: Any, seed: Harness, tmp_path: Path
) -> None:
    """A harness leg whose budget covers the incumbent only (a share cap nearly spent, an equal-spend run's last
    completions): no candidate gets a score, the leg rejects with the budget's reason instead of crashing (it raised
    KeyError on the winner's missing scores before)."""
    from whale_core.legs.budget import Budget

    a, b = seed.evolve(name="a", instruction="Sum them."), seed.evolve(name="b", instruction="Add them.")
    table = {seed.name: [0.0] * 40, "a": [1.0] * 40, "b": [1.0] * 40}
    bud = Budget(40)
    res, archive, run_id = _leg(
        None, seed, suite, SearchConfig(candidates=2, rounds=[20, 40]), tmp_path, proposer=Scripted([a, b]),
        roll_many=_constructed(suite, table), policy_id="p0", budget=bud,
    )  # fmt: skip
    assert not res.accepted and res.incumbent_out == seed and res.winner_score is None
    assert "budget" in res.reason and bud.remaining("harness") == 0
    assert [d.kind for d in archive.decisions(run_id)] == ["reject"]
    assert {c.status for c in res.candidates if c.sha != seed.sha} == {"lost"}


def test_a_budget_cut_leg_keeps_a_clear_winner_of_the_rounds_it_paid_for(
    suite: Any, seed: Harness, tmp_path: Path
) -> None:
    """The budget pays for the incumbent and the first halving round only (the 1 % share cap's case: it sank a
    winner at z = 5.4 before). The round's clear winner is judged on the 20 problems it was scored on, at z
    Bonferroni-corrected over the round's 2 candidates, and accepted; the unpaid round's zeros do not pick it."""
    from whale_core.legs.budget import Budget

    a, b = seed.evolve(name="a", instruction="Sum them."), seed.evolve(name="b", instruction="Add them.")
    table = {seed.name: [0.0] * 40, "a": [1.0 if k % 10 < 6 else 0.0 for k in range(40)], "b": [0.0] * 40}
    bud = Budget(40 + 2 * 20)
    res, archive, run_id = _leg(
        None, seed, suite, SearchConfig(candidates=2, rounds=[20, 40]), tmp_path, proposer=Scripted([a, b]),
        roll_many=_constructed(suite, table), policy_id="p0", budget=bud,
    )  # fmt: skip
    assert res.accepted and res.incumbent_out.sha == a.sha
    assert res.paired is not None and res.paired.n == 20 and "threshold z=1.96" in res.paired.reason
    assert "round 1 (2 candidates" in res.reason and "budget" in res.reason
    assert [d.kind for d in archive.decisions(run_id)] == ["accept"]
    assert bud.remaining("harness") == 0


def test_a_budget_cut_leg_rejects_a_winner_inside_the_corrected_noise(
    suite: Any, seed: Harness, tmp_path: Path
) -> None:
    """The same cut, with a winner that clears the plain z = 1.645 on its 20 problems but not the threshold corrected
    for having picked it among 8: the leg keeps the incumbent."""
    from whale_core.legs.budget import Budget
    from whale_core.legs.selection import paired_test

    base = [0.0] * 40
    edge = [1.0 if k in (0, 5, 10) else 0.0 for k in range(40)]  # +3/20 on the first 20: z = 1.83
    assert paired_test(base[:20], edge[:20]).accept  # the uncorrected test would take it
    names = [f"c{i}" for i in range(8)]
    cands = [seed.evolve(name=n, instruction=f"Add them ({n}).") for n in names]
    table = {seed.name: base, "c0": edge, **{n: [0.0] * 40 for n in names[1:]}}
    bud = Budget(40 + 8 * 20)
    res, archive, run_id = _leg(
        None, seed, suite, SearchConfig(candidates=8, rounds=[20, 40]), tmp_path, proposer=Scripted(cands),
        roll_many=_constructed(suite, table), policy_id="p0", budget=bud,
    )  # fmt: skip
    assert not res.accepted and res.incumbent_out == seed
    assert res.paired is not None and res.paired.n == 20 and not res.paired.accept
    assert "threshold z=2.498" in res.paired.reason
    assert [d.kind for d in archive.decisions(run_id)] == ["reject"]


class RejectsItsOwn:
    """A proposer that itself rejects a parseable block, in its raw (non-canonical) form — the LLM proposer's
    ``more than k candidates in the reply`` — beside one valid candidate."""

    def __init__(self, seed: Harness) -> None:
        self.seed = seed

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        raw = self.seed.evolve(instruction="Spare.").text.replace(": ", ":   ")  # parses; not the canonical text
        good = self.seed.evolve(fewshot={"k": 1})
        return [Proposal(good.text, good, "valid", None, "x"), Proposal(raw, None, "rejected", "more than k", "x")]


def test_a_proposal_its_proposer_rejected_is_stored_raw(suite: Any, seed: Harness, tmp_path: Path) -> None:
    """Found by the hostile matrix (issue 30): a reply of 20,000 blocks ended the leg with 'candidate text differs
    from stored harness' — the gate parsed a proposer-rejected block into a harness row, then stored the raw text
    against it. A proposer's own rejection keeps its raw text and no harness."""
    table = {seed.sha: [0.0] * 40}
    _, archive, run_id = _leg(
        None, seed, suite, SearchConfig(candidates=2, rounds=[20, 40]), tmp_path, proposer=RejectsItsOwn(seed),
        roll_many=_constructed(suite, {**table, seed.evolve(fewshot={"k": 1}).sha: [0.0] * 40}), policy_id="p0",
    )  # fmt: skip
    rejected = [c for c in archive.candidates(run_id) if c.status == "rejected"]
    assert [(c.harness_sha, c.reason) for c in rejected] == [(None, "more than k")]
    assert rejected[0].text is not None and ":   " in rejected[0].text


def test_component_leg_records_usage_and_the_run_budget_carries_over_legs(
    server: Any, api_key: str, micro_policy: Any, suite: Any, seed: Harness, tmp_path: Path
) -> None:
    """A component-edit leg (scripted server): every candidate recorded with its component-tagged reason, the
    proposer's spend in the leg's metrics (what the archive and MLflow keep) and in the report's line; the run's
    budget counts the earlier legs' spend read back from the archive, and a leg with none left records why."""
    from whale_core.legs.harness_context import proposer_spent
    from whale_core.science.report import proposer_lines

    server.refuse_formats = {"json_schema"}  # the provider refuses the schema: JSON mode from then on
    server.push(json.dumps({"instruction": "Add the two numbers. Reply with the sum only."}))
    server.push('{"instruction": "Add the two', finish_reason="length")  # cut off: never adopted, fed back
    server.push(json.dumps({"instruction": seed.spec.instruction}))  # the retry: no change
    cfg = _llm_cfg(server, edit="component", selector="round-robin", proposer_budget={"tokens": 5000})
    cfg = cfg.model_copy(update={"candidates": 2})
    archive, run_id = _archive(tmp_path)
    leg = archive.start_leg(run_id, 0, "harness")
    res = run_harness_leg(
        policy=micro_policy, incumbent=seed, suite=suite, cfg=cfg, archive=archive, run_id=run_id, leg_id=leg.id,
        iteration=0, seed=0, traces_dir=tmp_path / "traces", batch_size=16,
        restrict_to=frozenset({"instruction"}),
    )  # fmt: skip
    rows = archive.candidates(run_id)
    assert sorted(r.status for r in rows)[-1] == "rejected" and len(rows) == 2
    (rejected,) = [r for r in rows if r.status == "rejected"]
    assert rejected.reason == "instruction: no change" and rejected.text is not None
    metrics = res.metrics()
    assert metrics["proposer_requests"] == 3 and metrics["proposer_retries"] == 1
    assert metrics["proposer_fallbacks"] == 1 and metrics["proposer_truncated"] == 1
    assert metrics["proposer_prompt_tokens"] == 3000 and metrics["proposer_completion_tokens"] == 900
    assert [(r.body.get("response_format") or {}).get("type") for r in server.requests] == [
        "json_schema", "json_object", "json_object", "json_object"]  # fmt: skip
    line = " ".join(proposer_lines(metrics))
    assert "3 requests (1 fed back, 1 cut off, 1 output-mode fallbacks)" in line
    assert "3,000 prompt + 900 completion tokens" in line
    archive.finish_leg(leg.id, budget_used=res.completions, metrics=metrics)
    assert proposer_spent(archive, run_id, None)["prompt_tokens"] == 3000

    # the next leg of the same run: 3,900 of 5,000 spent → one request (1,300), then the budget stops it
    server.push(json.dumps({"instruction": "Sum them; digits only."}))
    server.push(json.dumps({"instruction": "Write the sum."}))
    res2 = run_harness_leg(
        policy=micro_policy, incumbent=seed, suite=suite, cfg=cfg, archive=archive, run_id=run_id, leg_id=None,
        iteration=2, seed=0, traces_dir=tmp_path / "traces2", batch_size=16, restrict_to=frozenset({"instruction"}),
    )  # fmt: skip
    assert res2.metrics()["proposer_requests"] == 1
    assert any("proposer budget spent: 5,200 of 5,000 tokens" in (c.reason or "") for c in res2.candidates)
    archive.finish_leg(archive.start_leg(run_id, 2, "harness").id, budget_used=0, metrics=res2.metrics())
    # a third leg: nothing left before the first request → the decision says so, the incumbent is kept
    res3 = run_harness_leg(
        policy=micro_policy, incumbent=seed, suite=suite, cfg=cfg, archive=archive, run_id=run_id, leg_id=None,
        iteration=4, seed=0, traces_dir=tmp_path / "traces3", batch_size=16, restrict_to=frozenset({"instruction"}),
    )  # fmt: skip
    assert res3.reason.startswith("proposer budget spent") and res3.incumbent_out == seed
    assert [d.kind for d in archive.decisions(run_id)][-1] == "proposer-budget-spent"
    assert len(server.requests) == 5  # the refused one included
