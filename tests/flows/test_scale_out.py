"""Candidate scoring fans out through a real local Dask cluster (prefect-dask), not only threads."""

from __future__ import annotations

from pathlib import Path

import pytest
from flow_helpers import make_home, now, task_states, whale

pytestmark = pytest.mark.slow


def test_harness_leg_on_a_local_dask_cluster(tmp_path: Path, micro_model_dir: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    since = now()
    res = whale(
        env, "run", "--run-id", "dask", "--mode", "harness-only",
        "--set", f"model.name={micro_model_dir}", "--set", "iterations=1",
        "--set", "orchestration.task_runner=dask", "--set", "orchestration.max_workers=2",
        "--set", "search.candidates=3", "--set", "search.rounds=[8,16]",
        "--set", "rollout.val_problems=16", "--set", "rollout.test_problems=16",
        "--set", "suite.sizes={train: 100, val: 40, test: 40}",
    )  # fmt: skip
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    run_log = (Path(env["WHALE_HOME"]) / "runs" / "dask" / "whale.log").read_text()  # Prefect's lines go there
    assert "Creating a new Dask cluster" in run_log
    assert "Task run" not in log, log[-4000:]  # not even from the Dask workers (their own processes)
    scored = [s for s in task_states(env, since) if s["name"].startswith("score-harness")]
    assert len(scored) >= 4 and {s["state"] for s in scored} == {"Completed"}
