"""The fault matrix: a run killed with SIGKILL at each point where a crash loses work, resumed each time, must end
exactly as an uninterrupted run of the same seed — same checkpoint and harness chain, same decisions, no lost
artifact, no duplicate MLflow run, no completed task computed twice — and its records must read like that run's.

Cheap and deterministic by design: the kills come from the ``WHALE_FAULT`` test hook (``tasks/fault.py``: the process
SIGKILLs its own process group at a named point, i.e. at a precise place, not after a guessed sleep), and the points
are chained through ONE run: the run is killed at the first point, its resume is armed with the next point and
killed there, and so on; the last resume runs to the end. Each resume therefore starts from a different crash and must
get past it. A task that comes back ``Cached`` reaches no point, so every resume runs on to its own point. One
uninterrupted run of the same config in another home is the reference.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import REPO, SMALL, make_home, mlflow_client, mlflow_run_keys, mlflow_runs, whale

from whale_core.records.archive import Archive

pytestmark = pytest.mark.slow

# SMALL, smaller still: the matrix runs 10 processes.
CONFIG = [
    *SMALL,
    "rollout.val_problems=32",
    "rollout.test_problems=32",
    "search.rounds=[16,32]",
    "weights.steps=4",
]

# In the order a run reaches them (iteration 0 is a harness leg, iteration 1 a weights leg).
CHAIN = [
    "propose-harness",  # iteration 0: the proposer's reply computed, not yet returned
    "score-harness:2",  # iteration 0: candidates stored as proposed, the second scoring done, not returned
    "plateau-check",  # iteration 1's decision (iteration 0's comes back Cached)
    "grpo-update-before-checkpoint",  # iteration 1: the first GRPO step, before any TRL checkpoint
    "grpo-update-after-checkpoint",  # iteration 1: right after the first TRL checkpoint (the next resume uses it)
    "grpo-update",  # iteration 1: the update's final checkpoint saved, its result not yet returned
    "rollout",  # iteration 1: the val evaluation of the trained policy
    "rollout-test:2",  # the final test evaluation: the initial pair's done, the final pair's not returned
]


def _sets() -> list[str]:
    return [arg for item in CONFIG for arg in ("--set", item)]


def _whale_killed_at(env: dict[str, str], point: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``whale ARGS`` in its own session, armed to SIGKILL its process group (it and its Prefect server) at
    ``point``."""
    return subprocess.run(
        [sys.executable, "-m", "whale_cli", *args],
        env={**env, "WHALE_FAULT": point},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        start_new_session=True,
    )


def _archive(home: Path) -> Archive:
    return Archive(f"sqlite:///{home / 'whale.db'}")


def _done_chain(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (x.iteration, x.kind, x.incumbent_harness_in, x.incumbent_harness_out, x.checkpoint_in, x.checkpoint_out,
         x.budget_used)
        for x in _archive(home).legs(run_id)
        if x.status == "done"
    ]  # fmt: skip


def _decisions(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    return [(d.iteration, d.kind, d.reason, d.payload_json) for d in _archive(home).decisions(run_id)]


def _judged_candidates(home: Path, run_id: str) -> list[tuple[Any, ...]]:
    """(iteration, harness, status, reason) of the candidates of the run's done legs."""
    archive = _archive(home)
    iteration = {x.id: x.iteration for x in archive.legs(run_id) if x.status == "done"}
    return sorted(
        (iteration[c.leg_id], c.harness_sha or "", c.status, c.reason)
        for c in archive.candidates(run_id)
        if c.leg_id in iteration
    )


def _models(home: Path, run_id: str) -> list[Any]:
    client = mlflow_client(home)
    runs = mlflow_runs(home, run_id)
    return list(
        client.search_logged_models(
            experiment_ids=[runs[0].info.experiment_id], filter_string=f"tags.`whale.run_id` = '{run_id}'"
        )
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> dict[str, Any]:
    env = make_home(tmp_path_factory.mktemp("reference"), models_dir)
    home = Path(env["WHALE_HOME"])
    env["WHALE_FAULT_JOURNAL"] = str(home / "journal")
    res = whale(env, "run", "--run-id", "ref", *_sets())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {
        "home": home,
        "summary": json.loads((home / "runs" / "ref" / "summary.json").read_text()),
        "journal": (home / "journal").read_text().splitlines(),
    }


def test_a_run_killed_at_every_fault_point_resumes_to_the_uninterrupted_result(
    reference: dict[str, Any], tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    env["WHALE_FAULT_JOURNAL"] = str(home / "journal")
    for n, point in enumerate(CHAIN):
        args = ["run", "--run-id", "crash", *_sets()] if n == 0 else ["resume", "crash"]
        out = _whale_killed_at(env, point, *args)
        assert out.returncode == -signal.SIGKILL, f"{point}: not killed there (rc {out.returncode}):\n" + (
            out.stdout[-2000:] + out.stderr[-2000:]
        )
    final = whale(env, "resume", "crash")
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    ref_home, ref = reference["home"], reference["summary"]
    summary = json.loads((home / "runs" / "crash" / "summary.json").read_text())

    # the same result, reached the same way
    for key in ("final_checkpoint", "final_harness", "test_initial", "test_final", "val_initial", "val_final", "legs"):
        assert summary[key] == ref[key], (key, summary[key], ref[key])
    assert _done_chain(home, "crash") == _done_chain(ref_home, "ref")
    assert [c.id for c in _archive(home).checkpoints("crash")] == [c.id for c in _archive(ref_home).checkpoints("ref")]

    # records that read like the uninterrupted run's: each decision once, every candidate judged, attempts marked
    assert _decisions(home, "crash") == _decisions(ref_home, "ref")
    assert _judged_candidates(home, "crash") == _judged_candidates(ref_home, "ref")
    archive = _archive(home)
    assert archive.candidates("crash", status="proposed") == []
    statuses = Counter(x.status for x in archive.legs("crash"))
    # killed inside a leg: propose-harness, score-harness (iteration 0), the three GRPO points, rollout (iteration 1)
    assert statuses == {"done": 2, "interrupted": 6}, statuses
    report = (home / "runs" / "crash" / "report.md").read_text()
    assert "nan" not in report
    table = [  # the legs table's rows of iterations 0 and 1 (the report's other tables have rows like "| 1 | 4 |")
        line
        for line in report.splitlines()
        if line.startswith(("| 0 |", "| 1 |")) and line.split("|")[2].strip() in ("harness", "weights")
    ]
    assert [row.split("|")[3].strip() for row in table] == ["done", "done"], table
    assert "Earlier attempts, kept in the archive as history" in report

    # nothing lost, nothing duplicated in MLflow
    keys = mlflow_run_keys(home, "crash")
    assert keys == mlflow_run_keys(ref_home, "ref") and set(keys.values()) == {1}, keys
    client = mlflow_client(home)
    models = _models(home, "crash")
    assert len(models) == len(_models(ref_home, "ref")) == 1
    for m in models:
        assert str(m.status).endswith("READY") and client.list_logged_model_artifacts(m.model_id), m
    monkeypatch.setenv("WHALE_HOME", str(home))  # the archive stores paths relative to the home it is read in
    for ckpt in archive.checkpoints("crash"):
        assert Path(ckpt.path).is_dir() and ckpt.mlflow_model_id, ckpt
    for ev in archive.evaluations("crash"):
        assert ev.traces_path is None or Path(ev.traces_path).is_file(), ev

    # no completed task computed twice (a cache key names one piece of work), and as much work per task as the
    # reference did (keys differ between the homes where a policy's adapter path is an input)
    done = Counter((home / "journal").read_text().splitlines())
    assert {k: n for k, n in done.items() if n > 1} == {}
    assert Counter(line.split()[0] for line in done) == Counter(line.split()[0] for line in reference["journal"])
    with sqlite3.connect(Path(env["PREFECT_HOME"]) / "prefect.db") as con:  # Prefect's own view of the last resume
        cached = con.execute("select count(*) from task_run where state_name = 'Cached'").fetchone()[0]
    assert cached > 0


def test_an_unwritable_home_is_a_one_line_error(tmp_path: Path, models_dir: Path) -> None:
    """WHALE_HOME where nothing can be written (here: below a regular file, which even root cannot write into)."""
    env = make_home(tmp_path, models_dir)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env.update(WHALE_HOME=str(blocker / "home"), PREFECT_HOME=str(blocker / "home" / "prefect"))
    out = whale(env, "run", "--set", "iterations=1", timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr and out.stderr.startswith("error: "), out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
