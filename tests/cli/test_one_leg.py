"""``whale search`` and ``whale train``: one leg each through the engine, in a subprocess with its own home, on the
micro model (no Prefect server is started: the engine's calls run in the process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from whale_core.records.archive import Archive

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SMALL = ["--set", "suite.sizes={train: 200, val: 60, test: 60}", "--set", "rollout.batch_size=64"]


def _whale(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), COLUMNS="200", **extra)
    return subprocess.run([sys.executable, "-m", "whale_cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip


def test_search_runs_one_harness_leg_and_prints_names_literally(tmp_path: Path, micro_model_dir: Path) -> None:
    home = tmp_path / "home"
    res = _whale(home, "search", "--model", str(micro_model_dir), "--suite", "arith", "-k", "3",
                 "--set", "search.rounds=[16,40]", *SMALL)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "harness leaderboard" in res.stdout and "completions; archive run search-" in res.stdout
    assert "nan" not in res.stdout and "iter 0 harness: " in res.stdout  # one leg measures no val pair around it
    assert not (home / "prefect" / "prefect.db").exists()  # no orchestrator: the engine's calls ran in process
    run_id = res.stdout.rsplit("archive run ", 1)[1].split()[0]
    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    assert archive.get_run(run_id).status == "finished"
    cands = archive.candidates(run_id)
    assert len(cands) == 3 and {c.proposer for c in cands} == {"mutate"}
    assert {c.status for c in cands} <= {"accepted", "lost", "rejected"}
    assert [d.kind for d in archive.decisions(run_id)] == ["continue", "accept" if "accepted:" in res.stdout
                                                           else "reject"]  # fmt: skip


def test_train_runs_one_weights_leg_with_val_before_and_after(tmp_path: Path, micro_model_dir: Path) -> None:
    home = tmp_path / "home"
    grpo = ["--set", "weights.per_device_train_batch_size=16", "--set", "weights.num_generations=4"]
    res = _whale(home, "train", "--model", str(micro_model_dir), "--suite", "arith", "--steps", "2", "-n", "16",
                 *grpo, *SMALL)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "val score" in res.stdout and "→" in res.stdout
    assert "nan" not in res.stdout
    summary_file = next((home / "runs").glob("train-*/summary.json"))
    summary = json.loads(summary_file.read_text())
    assert summary["n"] == 16 and summary["completions"] == 2 * 16 + 16  # two GRPO steps, then the val evaluation
    assert (Path(summary["checkpoint"]) / "whale_checkpoint.json").is_file()
    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    [ckpt] = archive.checkpoints(summary_file.parent.name)
    assert ckpt.harness_sha == summary["harness"]


def test_search_prints_a_proposers_markup_literally(tmp_path: Path, micro_model_dir: Path, server: Any) -> None:
    """Issue 30, item 1: a reply whose harness name holds Rich markup crashed ``whale search`` (MarkupError, rc 1) in
    the ``rejected: ...`` line. Every console prints with markup off: the reason comes out as the proposer wrote it."""
    evil = "whale_harness: 1\nname: '[/bold]x[red]'\ninstruction: Add.\ntemplate: '{{ a }}+{{ b }}='\n"
    server.push(f"```yaml\n{evil}```\n", times=3)
    res = _whale(tmp_path / "home", "search", "--model", str(micro_model_dir), "--suite", "arith", "-k", "1",
                 "--proposer", "openai/test-model", "--api-base", server.api_base, "--set", "search.num_retries=0",
                 "--set", "search.rounds=[16,40]", *SMALL, OPENAI_API_KEY="sk-test")  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rejected = [ln for ln in res.stdout.splitlines() if ln.startswith("rejected: ")]
    assert rejected and "[/bold]x[red]" in rejected[0], res.stdout[-2000:]
