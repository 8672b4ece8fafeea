"""The block-ascent engine on a scripted world (tests/ascent/world.py): no model, no Prefect, no MLflow.

Each behaviour the engine issue asked for has a test that the old loop (in the Prefect flows) would fail: a harness
leg revisits the seed harness and earlier incumbents under new weights; the run's result is the best pair it visited,
not its last; a run that ends on a weights leg revisits with the final weights; a regressed weights leg is recorded
and ``continue_from: best`` does not build on it; a resumed run replays its legs without writing them twice.
"""

from __future__ import annotations

from pathlib import Path

from world import BASE, engine, harness, pattern

from whale_core.ascent.engine import Pair, best_pair
from whale_core.records.refs import HarnessRef

SEED = harness("seed")
A = harness("seed", fewshot={"k": 2})
B = harness("seed", instruction="Be exact.")
C = harness("seed", instruction="Do not explain.")


def val(p: float) -> float:
    """The val score (40 problems) of a pair whose true score is ``p`` in the scripted world."""
    return sum(pattern(p, 0, 40)) / 40


def test_a_harness_leg_after_weights_revisits_the_seed_and_wins_with_it(tmp_path: Path) -> None:
    """The SmolLM2 finding: demos help the base model, the trained model does better without them. The third leg
    re-scores the seed harness under the new weights as a candidate, and it wins."""
    true = {("base", SEED.sha): 0.1, ("base", A.sha): 0.3, ("base+w1", A.sha): 0.45, ("base+w1", SEED.sha): 0.6}
    e, calls, archive = engine(tmp_path, ["iterations=3", "mode=whale-fixed"], true, proposals={0: [A], 2: [B, C]})
    res = e.run()
    assert [o.leg for o in res.history] == ["harness", "weights", "harness"]
    assert [o.accepted for o in res.history] == [True, None, True]
    assert (res.best.policy.checkpoint_id, res.best.harness.sha) == ("base+w1", SEED.sha)
    assert res.best.metric > 0.55 and res.best.same(res.last)
    revisits = [c for c in archive.candidates("r") if c.proposer == "revisit"]
    assert [(c.harness_sha, c.status) for c in revisits] == [(SEED.sha, "accepted")]
    # the first harness leg revisited nothing: the seed was its incumbent, and no weights had changed
    assert ("score", "seed") in calls.log


def test_the_run_reports_its_best_pair_not_its_last(tmp_path: Path) -> None:
    """A second weights leg loses on val: the final pair is the first one's, the regression is recorded."""
    true = {("base", SEED.sha): 0.1, ("base+w0", SEED.sha): 0.5, ("base+w0+w1", SEED.sha): 0.2}
    e, _, archive = engine(tmp_path, ["iterations=2", "mode=weights-only"], true)
    res = e.run()
    assert [p.policy.checkpoint_id for p in res.visited] == ["base", "base+w0", "base+w0+w1"]
    assert res.best.policy.checkpoint_id == "base+w0" and res.last.policy.checkpoint_id == "base+w0+w1"
    regressed = [d for d in archive.decisions("r") if d.kind == "regressed"]
    v = val(0.2), val(0.5)
    assert [d.iteration for d in regressed] == [1]
    assert f"lost on val: {v[0]:.4f} after vs {v[1]:.4f}" in regressed[0].reason


def test_continue_from_best_does_not_build_on_a_regressed_leg(tmp_path: Path) -> None:
    starts: list[str] = []

    def trained(pid: str, sha: str, i: int) -> str:
        starts.append(pid)
        return f"{pid}+w{i}"

    true = {("base+w0", SEED.sha): 0.5, ("base+w0+w1", SEED.sha): 0.2}
    (tmp_path / "last").mkdir()
    last, _, _ = engine(tmp_path / "last", ["iterations=3", "mode=weights-only"], true, trained=trained)
    last.run()
    assert starts == ["base", "base+w0", "base+w0+w1"]
    starts.clear()
    (tmp_path / "best").mkdir()
    best, _, _ = engine(tmp_path / "best", ["iterations=3", "mode=weights-only", "schedule.continue_from=best"], true,
                        trained=trained)  # fmt: skip
    best.run()
    assert starts == ["base", "base+w0", "base+w0"]  # the third leg starts again from the best pair


def test_a_run_ending_on_weights_revisits_with_the_final_weights(tmp_path: Path) -> None:
    """H then W: no harness leg searches under the final weights, so the closing revisit scores the seed harness
    with them (eval budget), and it is the final pair."""
    true = {("base", SEED.sha): 0.1, ("base", A.sha): 0.3, ("base+w1", A.sha): 0.4, ("base+w1", SEED.sha): 0.55}
    e, calls, _ = engine(tmp_path, ["iterations=2", "mode=whale-fixed"], true, proposals={0: [A]})
    eval_before = e.budget.by_kind["eval"]
    res = e.run()
    assert (res.best.policy.checkpoint_id, res.best.harness.sha, res.best.after) == ("base+w1", SEED.sha, 2)
    assert (res.last.policy.checkpoint_id, res.last.harness.sha) == ("base+w1", A.sha)
    assert ("rollout", f"rollout-revisit-{SEED.sha[:12]}") in calls.log
    assert e.budget.by_kind["eval"] == eval_before + 2 * 40  # the initial evaluation and the closing revisit


def test_revisits_skip_what_this_policy_has_scored_and_take_the_archives_best(tmp_path: Path) -> None:
    """Under the base policy nothing is revisited (the seed is the first incumbent, its candidates were scored); the
    archive's best harness (``search.revisit_top``) joins the seed and the earlier incumbents under new weights."""
    true = {("base", A.sha): 0.3, ("base", B.sha): 0.25}
    e, _, archive = engine(tmp_path, ["iterations=4", "mode=whale-fixed", "search.revisit_top=1"], true,
                           proposals={0: [A, B], 2: [C]})  # fmt: skip
    e.run()
    by_leg: dict[int | None, list[str | None]] = {}
    legs = {leg.id: leg.iteration for leg in archive.legs("r")}
    for c in archive.candidates("r"):
        if c.proposer == "revisit":
            by_leg.setdefault(legs[c.leg_id], []).append(c.harness_sha)
    # leg 2 (after weights, incumbent A): the seed, then the archive's best other harness (B, 0.25 under base)
    assert by_leg == {2: [SEED.sha, B.sha]}


def test_no_progress_stop_counts_each_leg_kind_on_its_own(tmp_path: Path) -> None:
    """Harness legs that find nothing no longer stop a run whose weights legs still gain (issue 21's closing note).
    Here every other weights leg gains: the old rule (``stop_patience`` legs in a row of any kind) stopped after
    H W H W with the second weights leg flat; now the run goes on until the weights legs stall twice in a row."""
    ids = ["base"]
    for i in range(1, 14, 2):
        ids.append(f"{ids[-1]}+w{i}")
    scores = [0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3]
    true = {(pid, SEED.sha): s for pid, s in zip(ids, scores, strict=True)}
    e, _, archive = engine(tmp_path, ["iterations=null", "schedule.stop_patience=2", "mode=whale-fixed"], true,
                           trained=lambda pid, sha, i: f"{pid}+w{i}")  # fmt: skip
    res = e.run()
    assert res.best.metric == val(0.3)  # reached only by the third weights leg (iteration 5)
    assert [o.leg for o in res.history] == ["harness", "weights"] * 5
    stop = [d for d in archive.decisions("r") if d.kind == "stop"]
    assert len(stop) == 1 and stop[0].iteration == 10, stop
    assert "harness x5" in stop[0].reason and "weights x2" in stop[0].reason, stop[0].reason


def test_a_resumed_run_replays_its_legs_without_writing_them_twice(tmp_path: Path) -> None:
    true = {("base", A.sha): 0.3, ("base+w1", SEED.sha): 0.6}
    e, _, archive = engine(tmp_path, ["iterations=3", "mode=whale-fixed"], true, proposals={0: [A], 2: [B]})
    first = e.run()
    rows = (len(archive.legs("r")), len(archive.candidates("r")), len(archive.decisions("r")),
            len(archive.checkpoints("r")))  # fmt: skip
    again, _, _ = engine(tmp_path, ["iterations=3", "mode=whale-fixed"], true, proposals={0: [A], 2: [B]})
    second = again.run()
    assert (second.best.policy, second.best.harness) == (first.best.policy, first.best.harness)
    assert (len(archive.legs("r")), len(archive.candidates("r")), len(archive.decisions("r")),
            len(archive.checkpoints("r"))) == rows  # fmt: skip


def test_best_pair_prefers_the_later_of_equal_scores() -> None:
    h = HarnessRef.of(SEED)
    a, b = Pair(BASE, h, 0.5, (), -1), Pair(BASE, h, 0.5, (), 3)
    assert best_pair([a, b]) is b and best_pair([b, Pair(BASE, h, 0.4)]) is b
