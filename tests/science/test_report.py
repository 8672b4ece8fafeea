"""The run report (`whale_core.science.report`): leg attempts that a later attempt replaced are history, not table
rows."""

from __future__ import annotations

from pathlib import Path

from whale_core.harness import Harness
from whale_core.records.archive import Archive
from whale_core.science.report import TestScores as Scores
from whale_core.science.report import write_report
from whale_core.suites import load_suite


def test_interrupted_and_superseded_attempts_are_named_under_the_table_not_in_it(tmp_path: Path) -> None:
    """Before: a resumed run's report had a row of ``nan`` for each interrupted attempt."""
    seed = Harness.from_text(load_suite("arith").seed_harness)
    archive = Archive(f"sqlite:///{tmp_path / 'whale.db'}")
    archive.create_run("r", "whale-adaptive", {}, run_id="r")
    archive.put_harness(seed.sha, seed.text, seed.name)
    killed = archive.start_leg("r", 0, "harness", incumbent_harness_in=seed.sha, checkpoint_in="base")
    archive.end_attempt(killed.id, "interrupted", "its process ended before the leg finished")
    for i, kind in enumerate(("harness", "weights")):
        leg = archive.start_leg("r", i, kind, incumbent_harness_in=seed.sha, checkpoint_in="base")  # type: ignore[arg-type]
        archive.finish_leg(leg.id, budget_used=10, metrics={"val_score": 0.5, "val_score_before": 0.25})
        if kind == "weights":
            archive.end_attempt(leg.id, "superseded", "recomputed by whale rerun (generation 1)")
            again = archive.start_leg("r", i, kind, incumbent_harness_in=seed.sha, checkpoint_in="base")  # type: ignore[arg-type]
            archive.finish_leg(again.id, budget_used=12, metrics={"val_score": 0.75, "val_score_before": 0.5})
        archive.ensure_decision("r", i, "switch" if i else "continue", f"why {i}", {"leg": kind})
    failed = archive.start_leg("r", 2, "weights", incumbent_harness_in=seed.sha, checkpoint_in="base")
    archive.fail_leg(failed.id, "OSError: disk full")
    md, _ = write_report(
        archive, "r", tmp_path, initial_metric=0.25, test=Scores(0.1, 0.2, 32), seed_harness=seed,
        final_harness=seed, final_checkpoint="base", budget={},
    )  # fmt: skip
    text = md.read_text()
    rows = [line for line in text.splitlines() if line[:4] in ("| 0 ", "| 1 ", "| 2 ")]
    assert rows == [
        "| 0 | harness | done | why 0 | 0.2500 | 0.5000 | – | 10 |",  # no rollout.val_problems stored: no interval
        "| 1 | weights | done | why 1 | 0.5000 | 0.7500 | – | 12 |",
        "| 2 | weights | failed |  | – | – | – | 0 |",  # a failure that nothing replaced stays in the table
    ]
    assert "nan" not in text
    assert (
        "Earlier attempts, kept in the archive as history: iteration 0 harness leg interrupted; "
        "iteration 1 weights leg superseded." in text
    )


def test_report_has_outputs_intervals_leaderboard_budget_and_the_reward_curve(tmp_path: Path) -> None:
    import json

    from whale_core.science.outputs import RunOutputs, wilson

    lo, hi = wilson(0.5, 100)
    assert (round(lo, 3), round(hi, 3)) == (0.404, 0.596)  # the textbook Wilson interval
    assert wilson(0.0, 40)[0] == 0.0 and wilson(0.0, 40)[1] > 0.05  # no collapse at 0
    seed = Harness.from_text(load_suite("arith").seed_harness)
    better = seed.evolve(instruction="Add them.")
    archive = Archive(f"sqlite:///{tmp_path / 'whale.db'}")
    archive.create_run("r", "whale-fixed", {"rollout": {"val_problems": 200}}, run_id="r")
    for h in (seed, better):
        archive.put_harness(h.sha, h.text, h.name)
    leg = archive.start_leg("r", 0, "harness", incumbent_harness_in=seed.sha, checkpoint_in="base")
    for h, status, score in ((better, "accepted", 0.385), (seed, "lost", 0.07)):
        archive.add_candidate("r", h.sha, proposer="mutate", parent_sha=seed.sha, leg_id=leg.id, status=status,  # type: ignore[arg-type]
                              reason=f"{status} here")  # fmt: skip
        archive.record_evaluation("r", h.sha, "base", "val", "first200", score=score, n=200, completions=200,
                                  prompt_tokens=1, completion_tokens=1)  # fmt: skip
    archive.finish_leg(leg.id, budget_used=400, metrics={"val_score": 0.385, "val_score_before": 0.07})
    wleg = archive.start_leg("r", 1, "weights", incumbent_harness_in=better.sha, checkpoint_in="base")
    ckpt_dir = tmp_path / "runs" / "r" / "iter-01-weights" / "gen-0" / "checkpoint"
    ckpt_dir.mkdir(parents=True)
    steps = [{"step": i + 1, "reward_mean": r} for i, r in enumerate((0.25, 0.5, 0.75))]
    (ckpt_dir.parent / "leg_result.json").write_text(json.dumps({"steps": steps}))
    archive.put_checkpoint("c1", "r", str(ckpt_dir), better.sha)
    archive.finish_leg(wleg.id, budget_used=96, metrics={"val_score": 0.475, "val_score_before": 0.385},
                       checkpoint_out="c1")  # fmt: skip
    outputs = RunOutputs(tmp_path / "final_harness.yaml", str(ckpt_dir), "whale eval --split test")
    budget = {"total": 1000, "harness_share_cap": 0.5, "by_kind": {"weights": 96, "harness": 400, "eval": 600}}
    md, png = write_report(
        archive, "r", tmp_path, initial_metric=0.07, test=Scores(0.062, 0.504, 500), seed_harness=seed,
        final_harness=better, final_checkpoint="c1", budget=budget, outputs=outputs,
    )  # fmt: skip
    text = md.read_text()
    assert f"- final adapter: `{ckpt_dir}`" in text and "whale eval --split test" in text
    assert "| final (trained model, final harness) | 0.5040 | 500 | [0.460, 0.548] |" in text
    board = text[text.index("## Leaderboard, iteration 0") :]
    rows = [line for line in board.splitlines() if line.startswith("| `")][:2]
    assert rows[0].startswith(f"| `{better.sha[:12]}` | accepted | 0.3850 | 200 | [0.320, 0.454] |")
    assert rows[1].startswith(f"| `{seed.sha[:12]}` | lost | 0.0700 | 200 |")
    assert "| harness | 400 | 500 (50% of total) |" in text and "| eval | 600 |" in text
    assert "| 1 | 3 | 0.2500 | 0.7500 | 0.5000 |" in text  # the weights leg's per-step rewards
    assert (tmp_path / "reward_curve.png").stat().st_size > 5_000 and png.stat().st_size > 5_000
