"""`whale compare` end to end on the micro model: two modes through the same flow under one budget (with a harness
share cap that binds), the report, the robustness matrix on test problems, MLflow; a failing run that does not kill
the comparison, and a second invocation with the same id that reuses the finished run and retries the failed one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import whale

pytestmark = pytest.mark.slow

# Small but real. With these settings the first harness leg spends 192 completions; the cap (0.045 x 5000 = 225)
# then leaves too little for a second harness leg, so in harness-only the cap is what stops the search.
BASE = [
    "iterations=2",
    "rollout.val_problems=40",
    "rollout.test_problems=40",
    "rollout.batch_size=64",
    "search.candidates=3",
    "search.rounds=[16,40]",
    "weights.steps=4",
    "weights.per_device_train_batch_size=16",
    "weights.num_generations=4",
    "weights.save_steps=2",
    "budget.total=5000",
    "budget.harness_share_cap=0.045",
    "suite.sizes={train: 200, val: 60, test: 60}",
]


def _env(tmp: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), PYTHONUNBUFFERED="1")
    return env


def _compare(env: dict[str, str], model: Path, cid: str, modes: str, *extra: str) -> tuple[Any, dict[str, Any]]:
    sets = [x for x in extra if x.startswith("--")]  # options; the rest are --set overrides
    for item in [f"model.name={model}", *BASE, *(x for x in extra if not x.startswith("--"))]:
        sets += ["--set", item]
    res = whale(env, "compare", "--modes", modes, "--seeds", "1", "--id", cid, *sets, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    state = json.loads((Path(env["WHALE_HOME"]) / "compare" / cid / "compare.json").read_text())
    return res, state


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory, micro_model_dir: Path) -> dict[str, Any]:
    env = _env(tmp_path_factory.mktemp("compare"))
    _, state = _compare(env, micro_model_dir, "t1", "whale-fixed,harness-only", "--matrix-n=16")
    return {"env": env, "home": Path(env["WHALE_HOME"]), "state": state}


def test_each_mode_runs_through_the_same_flow(compared: dict[str, Any]) -> None:
    state, home = compared["state"], compared["home"]
    outs = {o["label"]: o for o in state["outcomes"]}
    assert set(outs) == {"whale-fixed", "harness-only"}
    assert all(o["status"] == "finished" for o in outs.values()), [o["error"] for o in outs.values()]
    assert outs["whale-fixed"]["legs"] == ["harness", "weights"]
    assert set(outs["harness-only"]["legs"]) == {"harness"}
    from whale_core.records.archive import Archive

    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    for o in outs.values():
        run = archive.get_run(o["run_id"])
        assert (run.status, run.mode, run.config["mode"]) == ("finished", o["mode"], o["mode"])
        assert run.config["budget"] == {"total": 5000, "harness_share_cap": 0.045}


def test_budget_never_exceeded_and_harness_cap_holds(compared: dict[str, Any]) -> None:
    from whale_core.records.archive import Archive

    archive = Archive(f"sqlite:///{compared['home'] / 'whale.db'}")
    cap = int(0.045 * 5000)
    for o in compared["state"]["outcomes"]:
        legs = archive.legs(o["run_id"])
        by_kind = {k: sum(leg.budget_used for leg in legs if leg.kind == k) for k in ("weights", "harness")}
        assert by_kind["weights"] + by_kind["harness"] <= 5000
        assert by_kind["harness"] <= cap
        assert o["budget"]["by_kind"]["harness"] == by_kind["harness"]
        assert o["budget"]["by_kind"]["weights"] == by_kind["weights"]
    ho = next(o for o in compared["state"]["outcomes"] if o["label"] == "harness-only")
    assert ho["budget"]["by_kind"]["harness"] > cap - 40, "the cap should be what stopped harness-only"


def test_report_figures_matrix_and_mlflow(compared: dict[str, Any]) -> None:
    home, state = compared["home"], compared["state"]
    out = home / "compare" / "t1"
    for name in ("report.md", "bars.png", "curves.png", "robustness.png", "robustness.json"):
        assert (out / name).is_file(), name
    md = (out / "report.md").read_text()
    assert "## Held-out test score per mode" in md and "## Budget spent per leg kind" in md
    assert "Reproduce: `whale compare --modes whale-fixed,harness-only" in md
    matrix = json.loads((out / "robustness.json").read_text())
    assert matrix["n"] == 16 and matrix["models"][0] == "base" and len(matrix["models"]) == 3
    assert {"seed", "heldout"} <= set(matrix["kinds"])
    traces = list((out / "matrix-traces").glob("*.jsonl"))
    assert traces and all(t.name.startswith("test-") for t in traces)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    run = client.get_run(state["mlflow_run_id"])
    assert run.data.tags["whale.compare"] == "t1"
    assert "test_mean.whale-fixed" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "compare")}
    assert {"compare/report.md", "compare/bars.png", "compare/curves.png"} <= arts


def test_failed_run_is_reported_and_same_id_resumes(tmp_path: Path, micro_model_dir: Path) -> None:
    env = _env(tmp_path)
    bad = ["iterations=1", "weights.extra={not_a_grpo_field: 1}", "--no-matrix", "rollout.val_problems=16",
           "rollout.test_problems=16", "search.candidates=2", "search.rounds=[8,16]"]  # fmt: skip
    res, state = _compare(env, micro_model_dir, "t2", "harness-only,weights-only", *bad)
    outs = {o["label"]: o for o in state["outcomes"]}
    assert outs["harness-only"]["status"] == "finished" and outs["harness-only"]["source"] == "run"
    assert outs["weights-only"]["status"] == "failed" and "not_a_grpo_field" in outs["weights-only"]["error"]
    md = (Path(env["WHALE_HOME"]) / "compare" / "t2" / "report.md").read_text()
    assert "## Failed runs" in md and "t2-weights-only-s0" in md

    res, again = _compare(env, micro_model_dir, "t2", "harness-only,weights-only", *bad)
    outs2 = {o["label"]: o for o in again["outcomes"]}
    assert outs2["harness-only"]["source"] == "archive"
    assert outs2["harness-only"]["test_final"] == outs["harness-only"]["test_final"]
    assert outs2["weights-only"]["status"] == "failed"
    assert again["mlflow_run_id"] == state["mlflow_run_id"]
    assert "Flow run 't2-harness-only-s0'" not in res.stdout + res.stderr  # not run again
