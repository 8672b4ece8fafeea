"""A portable home (`whale_core.records.portable`): archive paths relative to the home, a moved MLflow SQLite store
pointed at its new ``mlartifacts/``."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from whale_core.records.archive import Archive
from whale_core.records.portable import from_home, relocate_mlflow_store, to_home


def test_paths_under_the_home_are_relative_and_resolve_against_the_current_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert to_home(home / "runs" / "r" / "ckpt", home) == "runs/r/ckpt"
    assert to_home("/elsewhere/model", home) == "/elsewhere/model"  # outside the home: as given
    assert from_home("runs/r/ckpt", tmp_path / "moved") == str((tmp_path / "moved").resolve() / "runs/r/ckpt")
    assert from_home("/old/home/runs/r/ckpt", home) == "/old/home/runs/r/ckpt"  # an old absolute row, as stored


def test_archive_paths_follow_a_moved_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("WHALE_HOME", str(home))
    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    archive.create_run("r", "whale-fixed", {}, run_id="r")
    archive.put_harness("h" * 64, "whale_harness: 1\nname: x\n")
    ckpt = home / "runs" / "r" / "iter-01-weights" / "checkpoint"
    archive.put_checkpoint("c1", "r", str(ckpt), "h" * 64)
    archive.put_checkpoint("c2", "r", "/outside/ckpt", "h" * 64)
    traces = str(home / "runs" / "r" / "traces" / "t.jsonl")
    archive.record_evaluation("r", "h" * 64, "c1", "val", "first8", score=0.5, n=8, completions=8, prompt_tokens=1,
                              completion_tokens=1, traces_path=traces)  # fmt: skip
    archive.close()
    stored = sqlite3.connect(home / "whale.db").execute("SELECT id, path FROM checkpoints ORDER BY id").fetchall()
    assert stored == [("c1", "runs/r/iter-01-weights/checkpoint"), ("c2", "/outside/ckpt")]
    moved = tmp_path / "moved"
    shutil.move(home, moved)
    monkeypatch.setenv("WHALE_HOME", str(moved))
    again = Archive(f"sqlite:///{moved / 'whale.db'}")
    assert again.find_checkpoint("c1").path == str(moved.resolve() / "runs/r/iter-01-weights/checkpoint")  # type: ignore[union-attr]
    assert again.find_checkpoint("c2").path == "/outside/ckpt"  # type: ignore[union-attr]
    (ev,) = again.evaluations("r")
    assert ev.traces_path == str(moved.resolve() / "runs/r/traces/t.jsonl")


def test_a_moved_mlflow_store_is_relocated_once_and_serves_its_artifacts(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    home = tmp_path / "home"
    home.mkdir()
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("whale", artifact_location=(home / "mlartifacts").as_uri())
    run = client.create_run(exp)
    text = tmp_path / "h.yaml"
    text.write_text("whale_harness: 1\nname: moved\n")
    client.log_artifact(run.info.run_id, str(text), "harnesses")
    assert relocate_mlflow_store(home) == 0  # not moved: nothing to do
    moved = tmp_path / "moved"
    shutil.move(home, moved)
    changed = relocate_mlflow_store(moved)
    assert changed >= 2  # the experiment and the run
    assert relocate_mlflow_store(moved) == 0  # idempotent
    again = MlflowClient(tracking_uri=f"sqlite:///{moved / 'mlflow.db'}")
    assert again.get_run(run.info.run_id).info.artifact_uri.startswith((moved / "mlartifacts").as_uri())
    got = again.download_artifacts(run.info.run_id, "harnesses/h.yaml", str(tmp_path / "dl"))
    assert Path(got).read_text() == text.read_text()


def test_relocation_leaves_other_stores_alone(tmp_path: Path) -> None:
    assert relocate_mlflow_store(tmp_path, "http://127.0.0.1:5000") == 0  # a server decides for itself
    assert relocate_mlflow_store(tmp_path, "postgresql://u@h/db") == 0
    assert relocate_mlflow_store(tmp_path) == 0  # no store file yet


def test_a_policy_ref_carries_its_checkpoint_dir_relative_to_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from whale_core.records.refs import PolicyRef

    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "moved"))
    lora = PolicyRef("tiny", "runs/r/iter-01-weights/gen-0/checkpoint", "c1", is_base=False)
    assert lora.model_dir == "tiny"  # the base model's name, not a path
    assert lora.adapter_dir == str((tmp_path / "moved").resolve() / "runs/r/iter-01-weights/gen-0/checkpoint")
    full = PolicyRef("runs/r/iter-01-weights/gen-0/checkpoint", None, "c1", is_base=False)
    assert full.model_dir == lora.adapter_dir and full.adapter_dir is None
    old = PolicyRef("tiny", "/old/home/runs/r/checkpoint", "c1", is_base=False)  # a ref persisted before: as stored
    assert old.adapter_dir == "/old/home/runs/r/checkpoint"
    assert PolicyRef("tiny", None, "base-x").model_dir == "tiny"
