"""The console of ``whale run`` (issue #20): progress and result lines per leg, a summary, and nothing of Prefect's
per-task chatter or its temporary server's URLs — those go to ``runs/<id>/whale.log``; ``--verbose`` brings them
back to the console. A short real run in a subprocess with its own home."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from flow_helpers import SMALL, make_home, whale

pytestmark = pytest.mark.slow

TEMP_SERVER_URL = re.compile(r"http://127\.0\.0\.1:(?!4200/)\d+/runs/")  # 4200: `whale ui --prefect`, printed


def test_run_console_is_quiet_and_the_log_file_holds_the_rest(tmp_path: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    sets = [a for item in SMALL for a in ("--set", item)]
    res = whale(env, "run", "--run-id", "quiet", *sets)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    console = res.stdout + res.stderr
    lines = console.splitlines()
    assert "Task run" not in console and "Flow run" not in console, console
    assert not TEMP_SERVER_URL.search(console), console
    assert "Loading weights" not in console and "FutureWarning" not in console, console
    # one progress line and one result line per leg (SMALL: harness, then weights)
    assert re.search(r"^candidates scored \d+/\d+, best so far \d\.\d{3}$", console, re.M), console
    assert re.search(r"^GRPO step 8/8 reward \d\.\d{3}$", console, re.M), console
    assert re.search(
        r"^iter 0 harness: val \d\.\d{3} → \d\.\d{3}, (accepted [0-9a-f]{12}|incumbent kept) ", console, re.M
    )
    assert re.search(r"^iter 1 weights: val \d\.\d{3} → \d\.\d{3} \(", console, re.M), console
    assert "test score (n=64)" in console and "spent" in console, console  # the summary's tables
    assert len(lines) <= 30, f"{len(lines)} console lines:\n{console}"  # the default run printed 85 before

    log = Path(env["WHALE_HOME"]) / "runs" / "quiet" / "whale.log"
    text = log.read_text()
    assert "Task run 'grpo-update-iter1' - Finished in state Completed()" in text, text[-3000:]
    assert "Flow run 'quiet/iter-00" in text and "GRPO step 8/8" in text, text[-3000:]
    assert TEMP_SERVER_URL.search(text), text[-3000:]  # Prefect's "View at" lines: in the file, not the console

    _prefect_says_what_runs(Path(env["WHALE_HOME"]), "quiet")

    # --verbose: Prefect's lines come back on the console (a resume of the finished run: every task Cached)
    res = whale(env, "resume", "quiet", "--verbose")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    verbose = res.stdout + res.stderr
    assert "Task run 'grpo-update-iter1' - Finished in state Cached" in verbose, verbose[-3000:]
    assert TEMP_SERVER_URL.search(verbose), verbose[-3000:]


def _prefect_says_what_runs(home: Path, run_id: str) -> None:
    """The run's records in its home's Prefect database (what `whale ui --prefect` shows) and the MLflow link."""
    with sqlite3.connect(home / "prefect" / "prefect.db") as db:
        flows = dict(db.execute("SELECT name, tags FROM flow_run").fetchall())
        tasks = db.execute("SELECT name, tags FROM task_run").fetchall()
        artifacts = {k: t for k, t in db.execute("SELECT key, type FROM artifact WHERE key IS NOT NULL")}
        top = db.execute("SELECT id FROM flow_run WHERE name = ?", (run_id,)).fetchone()[0]
    assert {name: sorted(json.loads(tags)) for name, tags in flows.items()} == {
        run_id: sorted([run_id, "whale-fixed"]),
        f"{run_id}/iter-00-harness": sorted([run_id, "whale-fixed", "harness"]),
        f"{run_id}/iter-01-weights": sorted([run_id, "whale-fixed", "weights"]),
    }
    names = {n for n, _ in tasks}
    assert {"plateau-check-iter0", "propose-harness-iter0", "grpo-update-iter1", "rollout-val-iter1"} <= names, names
    assert any(re.fullmatch(r"score-harness-[0-9a-f]{12}-r1", n) for n in names), names
    assert all(json.loads(tags) == [] for _, tags in tasks), tasks  # tags on flow runs only
    assert artifacts.get("leaderboard-iter-00") == "table" and "whale-report" in artifacts, artifacts
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("whale")
    assert exp is not None
    parent = client.search_runs([exp.experiment_id], filter_string="tags.`whale.kind` = 'run'")[0]
    assert parent.data.tags["whale.prefect_flow_run"] == f"http://127.0.0.1:4200/runs/flow-run/{top}"
