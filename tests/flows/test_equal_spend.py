"""Equal spend end to end on the micro model (issue 21): with ``iterations: null`` a run spends its budget — a harness
leg whose share cap is spent turns into a weights leg instead of ending the run — and a search that stops improving
ends on the no-progress rule, each stop recorded as a decision with its reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import whale

from whale_core.records.archive import Archive

pytestmark = pytest.mark.slow

COMMON = [
    "iterations=null",
    "rollout.val_problems=40",
    "rollout.test_problems=40",
    "rollout.batch_size=64",
    "search.candidates=3",
    "search.rounds=[16,40]",
    "weights.per_device_train_batch_size=16",
    "weights.num_generations=4",
    "weights.save_steps=10",
    "suite.sizes={train: 200, val: 60, test: 60}",
]


def _run(tmp: Path, model: Path, mode: str, *sets: str) -> tuple[dict[str, Any], Archive]:
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), PYTHONUNBUFFERED="1")
    args = ["run", "--mode", mode, "--run-id", f"eq-{mode}"]
    for item in [f"model.name={model}", *COMMON, *sets]:
        args += ["--set", item]
    res = whale(env, *args, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((home / "runs" / f"eq-{mode}" / "summary.json").read_text())
    return summary, Archive(f"sqlite:///{home / 'whale.db'}")


def test_capped_harness_budget_turns_into_weights_legs_until_the_budget_is_spent(
    tmp_path: Path, micro_model_dir: Path
) -> None:
    total = 3000
    summary, archive = _run(
        tmp_path, micro_model_dir, "whale-fixed", f"budget.total={total}", "budget.harness_share_cap=0.05",
        "weights.steps=20", "schedule.stop_patience=50",
    )  # fmt: skip
    legs = summary["legs"]
    assert legs[0] == "harness" and len(legs) > 4, legs  # more legs than the old default cap of 4
    by_kind = summary["budget"]["by_kind"]
    assert by_kind["harness"] <= total * 0.05
    # every leg after the cap was spent is a weights leg, each decided by the redirect (the schedule said harness)
    decisions = archive.decisions(summary["run_id"])
    redirected = [d for d in decisions if "share cap" in d.reason]
    assert redirected and all(legs[d.iteration] == "weights" for d in redirected)
    assert legs.count("harness") < legs.count("weights") - 1
    # spent: less than one weights step (16) plus a val evaluation (40) left
    assert by_kind["weights"] + by_kind["harness"] >= total - 56, by_kind
    stops = [d for d in decisions if d.kind == "stop"]
    assert len(stops) == 1 and "budget spent" in stops[0].reason


def test_a_search_without_progress_stops_on_the_no_progress_rule(tmp_path: Path, micro_model_dir: Path) -> None:
    summary, archive = _run(tmp_path, micro_model_dir, "harness-only", "budget.total=20000", "schedule.stop_patience=2")
    legs = summary["legs"]
    assert set(legs) == {"harness"} and len(legs) >= 2
    stops = [d for d in archive.decisions(summary["run_id"]) if d.kind == "stop"]
    assert len(stops) == 1 and stops[0].reason.startswith("no progress: best val"), stops
    assert "in the last legs of each kind (harness x2; stop_patience 2)" in stops[0].reason
    assert stops[0].iteration == len(legs)
    assert summary["budget"]["by_kind"]["harness"] < 20000 / 4  # the rule stopped it, not the budget
