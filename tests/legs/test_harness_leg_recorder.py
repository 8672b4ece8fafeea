"""`HarnessLeg` as a `Leg`: ``run(LegStart) -> LegResult``, its records through a `Recorder` — the archive as it goes,
then the MLflow mirror in one call from what the leg holds in memory, the same records the flow used to copy from the
archive (incumbent, every candidate in proposal order with status, score and reason, the leg's metrics); a replayed
leg writes nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from test_harness_leg import _constructed

from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.legs.harness_leg import HarnessLeg, HarnessLegOptions, SearchConfig
from whale_core.legs.leg import Leg, LegStart
from whale_core.proposers import Proposal, ProposalContext
from whale_core.records.archive import Archive
from whale_core.records.archive.tables import Base
from whale_core.records.recorder import Recorder
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites import SuiteConfig, load_suite


class FakeLineage:
    """Records what a `Lineage` was asked to log."""

    def __init__(self) -> None:
        self.harnesses: list[tuple[Any, ...]] = []
        self.metrics: list[tuple[str, dict[str, float], int | None]] = []
        self.boards: list[tuple[str, list[dict[str, Any]]]] = []

    def log_harness(self, run_id: str, sha: str, text: str, *, name: str, parent_sha: str | None, status: str,
                    score: float | None, reason: str | None = None) -> str:  # fmt: skip
        self.harnesses.append((run_id, sha, text, name, parent_sha, status, score, reason))
        return f"harnesses/{sha[:12]}-{status}.yaml"

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append((run_id, dict(metrics), step))

    def log_leaderboard(self, run_id: str, rows: list[dict[str, Any]]) -> bool:
        self.boards.append((run_id, rows))
        return True

    def harness_prompt(self, whale_run_id: str, sha: str) -> str | None:
        return f"prompts:/{whale_run_id}-harness/{sha[:4]}"


class Mixed:
    """A proposer's reply with every kind of proposal: one that never parsed, a duplicate of the incumbent, one
    without any text, and two valid ones."""

    def __init__(self, seed: Harness, valid: list[Harness]) -> None:
        self.seed, self.valid = seed, valid

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        return [
            Proposal("whale_harness: 1\nname: [oops\n", None, "rejected", "invalid YAML", "scripted"),
            Proposal(self.valid[0].text, self.valid[0], "valid", None, "scripted"),
            Proposal(self.seed.text, self.seed, "valid", None, "scripted"),  # duplicate of the incumbent
            Proposal(None, None, "rejected", "empty reply", "scripted"),
            Proposal(self.valid[1].text, self.valid[1], "valid", None, "scripted"),
        ]


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite(SuiteConfig(name="arith", sizes={"train": 40, "val": 40, "test": 10}))


def _old_mirror(archive: Archive, run_id: str, leg_id: int, incumbent: Harness, res: Any, lin: FakeLineage) -> None:
    """What flows/iteration.py logged before the Recorder: the harness leg's candidates re-read from the archive."""
    scores = {c.sha: c.score for c in res.candidates if c.sha}
    lin.log_harness("child", incumbent.sha, incumbent.text, name=incumbent.name, parent_sha=incumbent.parent,
                    status="incumbent", score=res.incumbent_score)  # fmt: skip
    for cand in archive.candidates(run_id, leg_id=leg_id):
        text = cand.text
        if text is None and cand.harness_sha:
            found = archive.find_harness(cand.harness_sha)
            text = found.text if found else None
        if not text:
            continue
        sha = cand.harness_sha or hashlib.sha256(text.encode()).hexdigest()
        lin.log_harness("child", sha, text, name=sha[:12], parent_sha=cand.parent_sha, status=cand.status,
                        score=scores.get(sha), reason=cand.reason)  # fmt: skip
    lin.log_metrics("child", res.metrics(), step=4)  # iteration 3's per-leg metrics are at step 4 (legs done)


def _dump(a: Archive) -> dict[str, list[tuple[Any, ...]]]:
    with a.engine.connect() as c:
        return {t.name: [tuple(r) for r in c.execute(select(t))] for t in Base.metadata.sorted_tables}


def _setup(suite: Any, tmp_path: Path, lineage: FakeLineage, *, replay: bool = False) -> tuple[Any, ...]:
    seed = Harness.from_text(suite.seed_harness)
    better = seed.evolve(name="better", instruction="Sum them.")
    noise = seed.evolve(name="noise", instruction="Add them.")
    base = [1.0 if k % 10 < 3 else 0.0 for k in range(40)]
    table = {seed.name: base, "better": [1.0 if k % 10 < 7 else 0.0 for k in range(40)], "noise": base}
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    run_id = archive.create_run("leg", "harness-only", {}, run_id="r").id if not replay else "r"
    leg_id = archive.start_leg(run_id, 3, "harness").id if not replay else 1
    rec = Recorder(archive, lineage, run_id=run_id, mlflow_run="child", replay=replay)  # type: ignore[arg-type]
    options = HarnessLegOptions(SearchConfig(candidates=5, rounds=[20, 40]), 0, tmp_path / "traces", 16)
    leg = HarnessLeg(options, suite, rec, proposer=Mixed(seed, [noise, better]), roll_many=_constructed(suite, table))
    policy = PolicyRef(model="micro", adapter=None, checkpoint_id="p0")
    start = LegStart(run_id, 3, policy, HarnessRef.of(seed), 0.3, Budget(10_000), leg_id=leg_id)
    return leg, start, archive, seed, better


def test_harness_leg_is_a_leg(suite: Any, tmp_path: Path) -> None:
    lineage = FakeLineage()
    leg, start, _archive, _seed, better = _setup(suite, tmp_path, lineage)
    assert isinstance(leg, HarnessLeg) and leg.kind == "harness"
    step: Leg = leg
    out = step.run(start)
    assert (out.kind, out.accepted, out.policy) == ("harness", True, start.policy)
    assert out.harness == HarnessRef.of(better) and out.completions == start.budget.spent > 0
    assert out.metrics == {"candidates": 5.0, "rejected": 3.0, "winner_score": pytest.approx(0.7),
                           "incumbent_score": pytest.approx(0.3)}  # fmt: skip
    # proposal order, the incumbent first; the proposal without any text is left out
    assert [h[5] for h in lineage.harnesses] == ["incumbent", "rejected", "lost", "rejected", "accepted"]
    assert lineage.metrics == [("child", dict(out.metrics), 4)]
    # the leaderboard: the incumbent, then best val score first, with prompt tokens where scored and the prompt
    ((run, board),) = lineage.boards
    assert run == "child" and board[0]["status"] == "incumbent" and board[0]["prompt_tokens"] > 0
    assert [r["status"] for r in board[1:3]] == ["accepted", "lost"]
    assert board[1]["val_score"] == pytest.approx(0.7) and board[1]["prompt_tokens"] > 0
    assert all(r["prompt"].startswith("prompts:/r-harness/") and len(r["sha12"]) == 12 for r in board)


def test_the_mirror_is_what_the_flow_used_to_copy_from_the_archive(suite: Any, tmp_path: Path) -> None:
    lineage = FakeLineage()
    leg, start, archive, seed, _better = _setup(suite, tmp_path, lineage)
    res = leg.search(run_id=start.run_id, iteration=3, incumbent=seed, policy_id="p0", budget=start.budget,
                     leg_id=start.leg_id)  # fmt: skip
    expected = FakeLineage()
    _old_mirror(archive, start.run_id, start.leg_id, seed, res, expected)
    assert lineage.harnesses == expected.harnesses and lineage.metrics == expected.metrics


def test_a_replayed_leg_writes_nothing(suite: Any, tmp_path: Path) -> None:
    first = FakeLineage()
    leg, start, archive, _seed, _better = _setup(suite, tmp_path, first)
    out = leg.run(start)
    before, quiet = _dump(archive), FakeLineage()
    again, start2, _a, _s, _b = _setup(suite, tmp_path, quiet, replay=True)
    res = again.run(start2)
    assert (res.harness, res.accepted) == (out.harness, True)
    assert _dump(archive) == before and quiet.harnesses == [] and quiet.metrics == [] and quiet.boards == []
