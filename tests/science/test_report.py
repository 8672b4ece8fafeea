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
