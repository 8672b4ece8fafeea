"""Real tiny WHALE runs through Prefect, checked from Prefect's task-run states and from MLflow itself.

Each run is a `whale` subprocess with its own project home; the tiny model is the session's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import REPO, SMALL, make_home, now, python, task_states, whale

pytestmark = pytest.mark.slow


def _sets(extra: list[str] | None = None) -> list[str]:
    args: list[str] = []
    for item in SMALL + (extra or []):
        args += ["--set", item]
    return args


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> dict[str, Any]:
    env = make_home(tmp_path_factory.mktemp("e2e"), models_dir)
    started = now()
    res = whale(env, "run", "--run-id", "e2e", *_sets())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "test score" in res.stdout
    return {"env": env, "home": Path(env["WHALE_HOME"]), "run_id": "e2e", "started": started, "out": res.stdout}


def _archive(home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The home's archive, read as that home's (its paths are relative to it)."""
    from whale_core.records.archive import Archive

    monkeypatch.setenv("WHALE_HOME", str(home))
    return Archive(f"sqlite:///{home / 'whale.db'}")


def _client(home: Path) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")


def _runs(home: Path, run_id: str) -> list[Any]:
    client = _client(home)
    exp = client.get_experiment_by_name("whale")
    assert exp is not None
    return list(client.search_runs([exp.experiment_id], filter_string=f"tags.`whale.run_id` = '{run_id}'"))


def _run_keys(home: Path, run_id: str) -> Counter[tuple[str | None, str | None]]:
    """How many MLflow runs per (kind, iteration): all 1 when nothing is duplicated."""
    return Counter((r.data.tags.get("whale.kind"), r.data.tags.get("whale.iteration")) for r in _runs(home, run_id))


def _harness_artifacts(home: Path, runs: list[Any]) -> dict[str, str]:
    """sha12 → status of every harness artifact in the run tree."""
    client = _client(home)
    found: dict[str, str] = {}
    for r in runs:
        for art in client.list_artifacts(r.info.run_id, "harnesses"):
            stem = Path(art.path).stem
            sha12, _, status = stem.partition("-")
            found[sha12] = status
    return found


def test_lineage_is_complete_in_mlflow(finished_run: dict[str, Any]) -> None:
    home, run_id = finished_run["home"], finished_run["run_id"]
    runs = _runs(home, run_id)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1
    assert sorted(r.data.tags["whale.leg"] for r in children) == ["harness", "weights"]
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert "val_score" in child.data.metrics and "budget_used" in child.data.metrics
    weights_child = next(c for c in children if c.data.tags["whale.leg"] == "weights")
    assert _client(home).get_metric_history(weights_child.info.run_id, "grpo/reward"), "per-step GRPO reward missing"
    assert "accepted" not in weights_child.data.metrics  # a weights leg accepts nothing
    assert {"test_score_initial", "test_score", "val_score"} <= set(parents[0].data.metrics)
    # the parent's val curve: step 0 = the initial evaluation, then one point per leg
    curve = sorted(m.step for m in _client(home).get_metric_history(parents[0].info.run_id, "val_score"))
    assert curve == [0, 1, 2], curve

    harnesses = _harness_artifacts(home, runs)
    models = _client(home).search_logged_models(
        experiment_ids=[parents[0].info.experiment_id], filter_string=f"tags.`whale.run_id` = '{run_id}'"
    )
    assert len(models) == 1
    ckpt_ids = {m.tags["whale.checkpoint_id"] for m in models}
    for m in models:
        assert m.tags["whale.harness_sha"][:12] in harnesses, "checkpoint's harness tag points to no artifact"
        parent = m.tags.get("whale.parent_checkpoint_id")
        assert parent is None or parent in ckpt_ids
    # every logged harness's parent is another logged harness, or it is a root (the seed)
    client = _client(home)
    for r in runs:
        for art in client.list_artifacts(r.info.run_id, "harnesses"):
            record = client.download_artifacts(r.info.run_id, art.path)
            header = Path(record).read_text().splitlines()[0]
            import json

            meta = json.loads(header.split(":", 1)[1])
            if meta["parent"] is not None and meta["status"] != "rejected":
                assert meta["parent"][:12] in harnesses, f"harness {meta['sha'][:12]} has a dangling parent"


@pytest.mark.browser
def test_from_the_landing_page_to_the_harness_a_checkpoint_was_trained_under(
    finished_run: dict[str, Any], tmp_path: Path
) -> None:
    """`whale ui` (the venv's script, venv not on PATH) over the real run's home prints the run's page; in headless
    Chromium, from that landing page, links alone lead to the final checkpoint (its val and test scores, with their
    datasets) and from it to the harness text it was trained under. Two clicks (before issue #20: 7-8 clicks and a
    64-hex param read by eye)."""
    import json
    import urllib.request

    from mlflow_ui import SHOTS, chromium, click_and_wait, open_and_wait, whale_ui

    home, run_id = finished_run["home"], finished_run["run_id"]
    client = _client(home)
    summary = json.loads((home / "runs" / run_id / "summary.json").read_text())
    (model,) = client.search_logged_models(
        experiment_ids=[_runs(home, run_id)[0].info.experiment_id],
        filter_string=f"tags.`whale.checkpoint_id` = '{summary['final_checkpoint']}'",
    )
    trained_under = model.tags["whale.harness_sha"]
    prompt_name, version = model.tags["whale.harness_prompt"].removeprefix("prompts:/").split("/")
    prompt = client.get_prompt_version(prompt_name, version)
    assert prompt.tags["whale.sha"] == trained_under and prompt.template.startswith("whale_harness")
    scores = {m.key: m for m in model.metrics}
    assert scores["test_score"].value == pytest.approx(summary["test_final"])
    assert (scores["val_score"].dataset_name, scores["test_score"].dataset_name) == ("arith-val", "arith-test")
    harness_name = next(x for x in prompt.template.splitlines() if x.startswith("name: ")).removeprefix("name: ")

    with whale_ui(finished_run["env"], tmp_path / "ui.log") as (base, landing, _proc), chromium(tmp_path / "p") as b:
        with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=whale") as r:
            tags = {t["key"]: t["value"] for t in json.load(r)["experiment"]["tags"]}
        assert tags["mlflow.experimentKind"] == "custom_model_development"  # opens on the runs
        assert landing == f"{base}/#/experiments/{model.experiment_id}/runs/{summary['mlflow_run_id']}"
        # the landing page (the only URL typed); then clicks only
        open_and_wait(b, landing, model.name, "ui_1_landing_run_page.png")
        text = click_and_wait(b, f"/models/{model.model_id}", "About this logged model", "ui_2_checkpoint_page.png")
        assert "val_score" in text and "arith-test" in text and prompt_name in text  # its scores and its harness
        text = click_and_wait(b, f"/prompts/{prompt_name}", harness_name, "ui_3_harness_text.png")
        assert "whale_harness" in text and "template" in text  # the harness text itself
    clicks = 2
    print(f"clicks from the landing page to the harness text: {clicks} (before: 7-8)")
    for shot in ("ui_1_landing_run_page.png", "ui_2_checkpoint_page.png", "ui_3_harness_text.png"):
        assert (SHOTS / shot).stat().st_size > 10_000


RESUME_PROBE = """
import sys
from flows.whale_run import resume_run
resume_run(sys.argv[1])
print("HEAVY", sorted(m for m in ("torch", "transformers", "peft", "trl") if m in sys.modules))
"""


def test_resume_of_a_finished_run_is_fully_cached_and_never_imports_torch(finished_run: dict[str, Any]) -> None:
    env, run_id, home = finished_run["env"], finished_run["run_id"], finished_run["home"]
    before = _run_keys(home, run_id)
    since = now()
    out = python(env, "-c", RESUME_PROBE, run_id, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    heavy = next(x for x in out.stdout.splitlines() if x.startswith("HEAVY "))
    assert heavy == "HEAVY []", heavy  # every task came from the cache: nothing needed torch
    leaves = [s for s in task_states(env, since) if not s["name"].startswith("block-ascent-iteration")]  # not subflows
    assert leaves and {s["state"] for s in leaves} == {"Cached"}, leaves
    assert _run_keys(home, run_id) == before  # re-attached to its MLflow runs: no duplicates


def test_rerun_recomputes_only_that_leg(finished_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    env, run_id = finished_run["env"], finished_run["run_id"]
    since = now()
    res = whale(env, "rerun", run_id, "--iteration", "1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    states = task_states(env, since)
    by_iter: dict[str, Counter[str]] = {}
    for s in states:
        assert not s["tags"], s  # labels are names: a task-run tag would cost a concurrency request per task
        it = "init" if s["name"] == "rollout-init" else s["flow_run"].removeprefix(f"{run_id}/")
        by_iter.setdefault(it, Counter())[s["state"]] += 1
    assert set(by_iter["iter-00-harness"]) == {"Cached"}, by_iter
    assert set(by_iter["init"]) == {"Cached"}, by_iter
    assert "Cached" not in by_iter["iter-01-weights"] and by_iter["iter-01-weights"]["Completed"] >= 2, by_iter
    # issue 30, item 7: the archive names the rerun's own copy (gen-1), as the summary does (was: gen-0 vs gen-2)
    summary = json.loads((finished_run["home"] / "runs" / run_id / "summary.json").read_text())
    ckpt = _archive(finished_run["home"], monkeypatch).find_checkpoint(summary["final_checkpoint"], run_id)
    assert ckpt is not None and summary["final_adapter"] == ckpt.path and "/gen-1/" in ckpt.path, (summary, ckpt)


def test_two_runs_of_one_config_each_own_their_outputs(
    finished_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, item 7: a second run of the same config in the same home got its weights leg from the first run's
    cache (0 s), its final adapter under ``runs/<first run>/``: moving or deleting the first run broke the second's
    reproduce line. Now each run trains into, and records, its own directory (the leg's directory is part of the
    task's key)."""
    env, home = finished_run["env"], finished_run["home"]
    res = whale(env, "run", "--run-id", "e2e-twin", *_sets())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    twin = json.loads((home / "runs" / "e2e-twin" / "summary.json").read_text())
    assert twin["final_adapter"] and "/runs/e2e-twin/" in twin["final_adapter"], twin
    held = _archive(home, monkeypatch).checkpoints("e2e-twin")
    assert held and all("/runs/e2e-twin/" in c.path for c in held), held
    shutil.move(home / "runs" / "e2e", tmp_path / "e2e-moved-away")  # the first run's directory is gone
    try:
        assert (Path(twin["final_adapter"]) / "whale_checkpoint.json").is_file()
    finally:
        shutil.move(tmp_path / "e2e-moved-away", home / "runs" / "e2e")


def _legs_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return int(con.execute("select count(*) from legs where status='done'").fetchone()[0])
    except sqlite3.Error:
        return 0


def _run_until_a_leg_is_done(env: dict[str, str], log: Path, run_id: str, sets: list[str]) -> subprocess.Popen[bytes]:
    """Start ``whale run`` in its own session (output to ``log``) and return once its first leg is done."""
    db = Path(env["WHALE_HOME"]) / "whale.db"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "whale_cli", "run", "--run-id", run_id, *_sets(sets)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.time() + 600
    try:
        while _legs_done(db) < 1:
            assert proc.poll() is None, "the run ended early:\n" + log.read_text()[-3000:]
            assert time.time() < deadline, "no leg finished within 10 minutes"
            time.sleep(1)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc


def test_sigkill_then_resume_finishes_with_cached_work(tmp_path: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    proc = _run_until_a_leg_is_done(env, tmp_path / "run.log", "crash", ["iterations=3", "weights.steps=40"])
    try:
        time.sleep(3)  # into the weights leg
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its ephemeral Prefect server, as a crash would
        proc.wait()
    assert _legs_done(home / "whale.db") < 3
    since = now()
    res = whale(env, "resume", "crash")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    states = task_states(env, since)
    iter0 = [s["state"] for s in states if s["flow_run"] == "crash/iter-00-harness"]
    init = [s["state"] for s in states if s["name"] == "rollout-init"]
    assert iter0 and set(iter0) == {"Cached"}, states
    assert init == ["Cached"], states
    runs = _runs(home, "crash")
    keys = _run_keys(home, "crash")
    assert all(v == 1 for v in keys.values()), f"duplicate MLflow runs: {keys}"
    assert sum(1 for r in runs if r.data.tags.get("whale.kind") == "leg") == 3
    client = _client(home)
    for m in client.search_logged_models(
        experiment_ids=[runs[0].info.experiment_id], filter_string="tags.`whale.run_id` = 'crash'"
    ):
        assert str(m.status).endswith("READY"), m.status
        assert client.list_logged_model_artifacts(m.model_id), "checkpoint without artifacts"


def test_sigterm_stops_the_run_and_its_temporary_prefect_server(tmp_path: Path, models_dir: Path) -> None:
    """`kill PID` (SIGTERM to the run alone, not its group) must not leave Prefect's server behind as an orphan."""
    import psutil

    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    proc = _run_until_a_leg_is_done(env, tmp_path / "run.log", "term", ["iterations=3"])
    try:
        app = "prefect.server.api.server:create_app"  # the server's factory, on WHALE's and Prefect's command line
        servers = [c for c in psutil.Process(proc.pid).children(recursive=True) if app in " ".join(c.cmdline())]
        assert servers, "no temporary Prefect server was running"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(servers, timeout=30)
        assert not alive, f"orphaned Prefect server(s): {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _legs_done(home / "whale.db") < 3  # stopped mid-run, the finished leg kept


def test_ctrl_c_stops_the_run_promptly_with_one_line_and_it_resumes(tmp_path: Path, models_dir: Path) -> None:
    """Issue 30, item 9: Ctrl-C (SIGINT to the process group) during GRPO killed the temporary Prefect server with the
    run, which then logged ConnectError tracebacks for ~3 min 44 s before it exited. The server now runs in its own
    session (it still dies with the run): the run stops within seconds, says how to resume, and resumes."""
    import psutil

    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    log = tmp_path / "run.log"
    proc = _run_until_a_leg_is_done(env, log, "intr", ["iterations=3", "weights.steps=200"])
    try:
        app = "prefect.server.api.server:create_app"
        servers = [c for c in psutil.Process(proc.pid).children(recursive=True) if app in " ".join(c.cmdline())]
        time.sleep(3)  # into the weights leg
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole foreground group
        assert proc.wait(timeout=120) == 130
        took = time.monotonic() - start
        _, alive = psutil.wait_procs(servers, timeout=60)
        assert not alive, f"orphaned Prefect server(s): {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text(errors="replace")
    assert took < 60, f"took {took:.0f} s to stop"
    assert "ConnectError" not in text and "Traceback" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith("error: interrupted: run intr stopped"), text[-1000:]
    assert "`whale resume intr` continues it" in text
    res = whale(env, "resume", "intr")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _legs_done(home / "whale.db") == 3
