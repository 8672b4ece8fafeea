"""A run's end, after its block ascent: the final test, the ready outputs, the report and ``summary.json``.

The final pair is the best pair by val the ascent visited (`whale_core.ascent.engine.best_pair`), not the last one.
On the test split the run evaluates the initial pair (base model, seed harness), the final pair and, when the pair
its last leg ended with is neither, that one too — so a report shows what choosing the best pair changed. These
evaluations are charged to ``eval`` (they steer nothing). The test problems are the suite's first
``rollout.test_problems``, the same for every run of a suite config.
"""

from __future__ import annotations

import json
from typing import Any

from whale_core.ascent.calls import Evaluation, Site
from whale_core.ascent.engine import AscentResult, BlockAscent, Pair
from whale_core.science.outputs import write_outputs
from whale_core.science.report import TestScores, write_report


def tested_pairs(result: AscentResult) -> list[tuple[str, Pair]]:
    """The pairs the final test evaluates: ``initial``, ``final`` (the best) and ``last`` when it is neither."""
    out = [("initial", result.initial), ("final", result.best)]
    if not result.last.same(result.best) and not result.last.same(result.initial):
        out.append(("last", result.last))
    return out


def final_note(result: AscentResult) -> str:
    """One sentence on which pair is final: the best by val, from which leg, and how the last pair compares."""
    best, last = result.best, result.last
    where = "the initial pair" if best.after < 0 else f"the pair after iteration {best.after}"
    if best.after >= len(result.history):
        where = "the closing revisit (a harness re-scored with the last weights)"
    if best.same(last):
        return f"Final pair: the best by val score the run visited ({best.metric:.4f}), which is also its last."
    return (
        f"Final pair: the best by val score the run visited, {where} ({best.metric:.4f}); the last leg ended with "
        f"val {last.metric:.4f}."
    )


def conclude(engine: BlockAscent, result: AscentResult) -> dict[str, Any]:
    """Test the pairs, write the outputs, the report and ``summary.json``; record the run's end; return the
    summary."""
    cfg, rec, run_dir = engine.cfg, engine.rec, engine.run_dir
    tests: dict[str, Evaluation] = {}
    for label, pair in tested_pairs(result):
        ev = engine.calls.rollout(pair.policy, pair.harness, "test", cfg.rollout.test_problems,
                                  Site(f"rollout-test-{label}"))  # fmt: skip
        engine.budget.charge("eval", ev.completions)
        tests[label] = ev
    best, budget = result.best, engine.budget
    last = tests.get("last")
    scores = TestScores(
        initial=tests["initial"].score, final=tests["final"].score, n=tests["final"].n,
        last=last.score if last else None, final_note=final_note(result),
    )  # fmt: skip
    outputs = write_outputs(run_dir, cfg, best.policy, best.harness)
    md, png = write_report(
        rec.store, engine.run_id, run_dir, initial_metric=result.initial.metric, test=scores,
        seed_harness=engine.seed_harness.load(), final_harness=best.harness.load(),
        final_checkpoint=best.policy.checkpoint_id, budget=budget.to_dict(), outputs=outputs,
    )  # fmt: skip
    rec.run_end(
        md, png, best.harness, best.metric, {"test_score_initial": scores.initial, "budget_spent": float(budget.spent)},
        test_score=scores.final, final_checkpoint=best.policy.checkpoint_id,
    )  # fmt: skip
    summary: dict[str, Any] = {
        "run_id": engine.run_id,
        "mode": cfg.mode,
        "test_initial": scores.initial,
        "test_final": scores.final,
        "test_last": scores.last,
        "test_n": scores.n,
        "val_initial": result.initial.metric,
        "val_final": best.metric,
        "val_last": result.last.metric,
        "final_from_iteration": best.after,
        "report": str(md),
        "final_harness": best.harness.sha,
        "final_checkpoint": best.policy.checkpoint_id,
        "budget": budget.to_dict(),
        "iterations": len(result.history),
        "legs": [o.leg for o in result.history],
        "stop": result.stop,
        "mlflow_run_id": rec.mlflow_parent,
        "mlflow_url": rec.lineage.run_url(rec.mlflow_parent) if rec.mlflow_parent else None,
        "final_harness_file": str(outputs.harness_file),
        "final_adapter": outputs.adapter,
        "reproduce": outputs.reproduce,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
