"""Helpers for flow tests: each real run happens in a subprocess with its own project home (its own Prefect DB,
archive and MLflow store), sharing only the tiny model the session already built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("prefect_probe.py")

# Small but real: both legs on the tiny model, a few GRPO steps, a handful of candidates.
SMALL = [
    "iterations=2",
    "schedule.start=harness",
    "rollout.val_problems=48",
    "rollout.test_problems=64",
    "search.candidates=3",
    "search.rounds=[16,48]",
    "weights.steps=8",
    "weights.per_device_train_batch_size=16",
    "weights.num_generations=4",
    "weights.save_steps=2",
    "budget.total=20000",
    "suite.sizes={train: 400, val: 100, test: 100}",
]


def make_home(tmp: Path, models: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir()
    (home / "models").symlink_to(models)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), PYTHONUNBUFFERED="1")
    return env


def whale(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return python(env, "-m", "whale_cli", *args, timeout=timeout)


def python(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in the repo with ``env``, output captured."""
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def task_states(env: dict[str, str], since: datetime) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, str(PROBE), since.isoformat()],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("PROBE"))
    return list(json.loads(line[len("PROBE") :]))


def now() -> datetime:
    return datetime.now(UTC)


def mlflow_client(home: Path) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")


def mlflow_runs(home: Path, run_id: str) -> list[Any]:
    """Every MLflow run (parent and legs) tagged with WHALE run ``run_id``."""
    client = mlflow_client(home)
    exp = client.get_experiment_by_name("whale")
    assert exp is not None
    return list(client.search_runs([exp.experiment_id], filter_string=f"tags.`whale.run_id` = '{run_id}'"))


def mlflow_run_keys(home: Path, run_id: str) -> dict[tuple[str | None, str | None], int]:
    """How many MLflow runs per (kind, iteration): all 1 when nothing is duplicated."""
    keys: dict[tuple[str | None, str | None], int] = {}
    for r in mlflow_runs(home, run_id):
        key = (r.data.tags.get("whale.kind"), r.data.tags.get("whale.iteration"))
        keys[key] = keys.get(key, 0) + 1
    return keys
