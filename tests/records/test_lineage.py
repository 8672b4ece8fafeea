"""Lineage (MLflow mirror) on a throw-away SQLite store: runs, re-attach, harness artifacts, checkpoints, figures."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from whale_core.records import mlflow_registry
from whale_core.records import mlflow_store as lineage_mod
from whale_core.records.lineage import (
    Lineage,
    flatten_params,
    is_secret_key,
    leg_run_name,
    parse_harness_artifact,
)
from whale_core.science.report import metric_curve_figure

SHA_A = "a" * 64
SHA_B = "b" * 64
HARNESS = "whale_harness: 1\nname: plain-sum\ninstruction: Add the two numbers.\n"


@pytest.fixture(scope="module")
def lin(tmp_path_factory: pytest.TempPathFactory) -> Lineage:
    root = tmp_path_factory.mktemp("mlflow")
    return Lineage(f"sqlite:///{root / 'mlflow.db'}", experiment="whale-test")


def test_artifacts_live_next_to_the_sqlite_store(lin: Lineage) -> None:
    exp = lin.client.get_experiment(lin.experiment_id)
    db_dir = Path(lin.tracking_uri.removeprefix("sqlite:///")).parent
    assert exp.artifact_location == (db_dir / "mlartifacts").as_uri()
    again = Lineage(lin.tracking_uri, experiment="whale-test")
    assert again.experiment_id == lin.experiment_id


def test_default_uri_is_under_whale_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WHALE_HOME", str(tmp_path))
    assert lineage_mod.default_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert lineage_mod.default_artifact_location("http://127.0.0.1:5000") is None
    pg = lineage_mod.default_artifact_location("postgresql://127.0.0.1:5432/test")
    assert pg == (tmp_path.resolve() / "mlartifacts").as_uri()


def test_parent_and_leg_runs_reattach_without_duplicates(lin: Lineage) -> None:
    parent = lin.ensure_run("wr-reattach", "run-reattach", {"seed": 0}, tags={"whale.mode": "whale-fixed"})
    leg = lin.ensure_leg(parent, "wr-reattach", 1, "weights")
    lin.end(leg)
    lin.end(parent, "KILLED")

    # resume with the stored ids, then with no ids at all (lookup by tags)
    assert lin.ensure_run("wr-reattach", "run-reattach", {"seed": 0}, existing_mlflow_run_id=parent) == parent
    assert lin.ensure_leg(parent, "wr-reattach", 1, "weights", existing_mlflow_run_id=leg) == leg
    assert lin.ensure_run("wr-reattach", "run-reattach", {"seed": 0}) == parent
    assert lin.ensure_leg(parent, "wr-reattach", 1, "weights") == leg
    harness_leg = lin.ensure_leg(parent, "wr-reattach", 1, "harness")
    assert harness_leg not in {parent, leg}

    runs = lin.runs_of("wr-reattach")
    assert [r.info.run_name for r in runs] == ["run-reattach", "iter-01-weights", "iter-01-harness"]
    by_id = {r.info.run_id: r for r in runs}
    assert by_id[leg].data.tags["mlflow.parentRunId"] == parent
    assert by_id[leg].data.tags["whale.iteration"] == "1"
    assert by_id[parent].data.tags["whale.mode"] == "whale-fixed"
    assert by_id[parent].info.status == "RUNNING"  # re-opened on resume
    assert leg_run_name(12, "harness") == "iter-12-harness"


def test_params_flattened_and_secrets_redacted(lin: Lineage) -> None:
    config = {
        "weights": {"lr": 5e-5, "lora": {"r": 16}},
        "decoding": {"max_new_tokens": 8},
        "proposer": {"model": "openai/gpt", "api_key": "sk-live", "hfToken": "hf_x", "stop": ["\n", ";"]},
        "archive_url": "postgresql://whale:hunter2@db:5432/whale",
        "credentials": {"user": "u", "pass": "p"},
    }
    run = lin.ensure_run("wr-params", "run-params", config)
    params = lin.client.get_run(run).data.params
    assert params["weights.lr"] == "5e-05"
    assert params["weights.lora.r"] == "16"
    assert params["decoding.max_new_tokens"] == "8"
    assert params["proposer.model"] == "openai/gpt"
    assert params["proposer.api_key"] == "***"
    assert params["proposer.hfToken"] == "***"
    assert params["proposer.stop"] == '["\\n", ";"]'
    assert params["archive_url"] == "postgresql://whale:***@db:5432/whale"
    assert params["credentials"] == "***"
    assert not any("hunter2" in v or "sk-live" in v for v in params.values())

    # re-attach adds missing params and keeps the first values (MLflow params are immutable)
    lin.ensure_run("wr-params", "run-params", {"weights": {"lr": 1.0}, "budget": {"total": 4096}})
    params = lin.client.get_run(run).data.params
    assert params["weights.lr"] == "5e-05"
    assert params["budget.total"] == "4096"


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("hf_token", True),
        ("OPENAI_API_KEY", True),
        ("apiKey", True),
        ("db-password", True),
        ("client_secret", True),
        ("max_new_tokens", False),
        ("tokens_per_step", False),
        ("keep_best", False),
    ],
)
def test_secret_key_rule(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret
    assert (flatten_params({key: "v"})[key] == "***") is secret


def test_metrics_per_step(lin: Lineage) -> None:
    run = lin.ensure_run("wr-metrics", "run-metrics", {})
    for step, value in enumerate([0.1, 0.25, 0.4]):
        lin.log_metrics(run, {"val/score": value, "budget/spent": 64.0 * (step + 1)}, step=step)
    history = lin.client.get_metric_history(run, "val/score")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.1), (1, 0.25), (2, 0.4)]
    assert lin.client.get_run(run).data.metrics["budget/spent"] == 192.0


def test_metric_history_of_a_whole_leg_in_batches(lin: Lineage) -> None:
    run = lin.ensure_run("wr-history", "run-history", {})
    rows = [
        (step, {"grpo/reward": step / 400, "grpo/reward_std": 0.5, "grpo/frac_zero_std": 0.0}) for step in range(1, 401)
    ]
    lin.log_metric_history(run, rows)  # 1,200 values: more than one log_batch of 1,000
    history = lin.client.get_metric_history(run, "grpo/reward")
    assert sorted((m.step, m.value) for m in history) == [(s, s / 400) for s in range(1, 401)]
    assert len(lin.client.get_metric_history(run, "grpo/frac_zero_std")) == 400
    assert lin.client.get_run(run).data.metrics["grpo/reward"] == 1.0  # the latest step's value


def test_threads_log_to_their_own_runs(lin: Lineage) -> None:
    parent = lin.ensure_run("wr-threads", "run-threads", {})
    legs = [lin.ensure_leg(parent, "wr-threads", i, "harness") for i in range(4)]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            lin.log_metrics(legs[i], {"candidate": float(i)}, step=i)
        except BaseException as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [lin.client.get_run(leg).data.metrics["candidate"] for leg in legs] == [0.0, 1.0, 2.0, 3.0]


def test_harness_artifact_roundtrip_and_idempotence(lin: Lineage) -> None:
    parent = lin.ensure_run("wr-harness", "run-harness", {})
    leg = lin.ensure_leg(parent, "wr-harness", 1, "harness")
    kw = {"name": "plain-sum", "parent_sha": SHA_B, "status": "accepted", "score": 0.625}
    path = lin.log_harness(leg, SHA_A, HARNESS, **kw)  # type: ignore[arg-type]
    assert path == f"harnesses/{SHA_A[:12]}-accepted.yaml"
    assert lin.log_harness(leg, SHA_A, HARNESS, **kw) == path  # type: ignore[arg-type]
    lin.log_harness(leg, SHA_B, HARNESS, name="x", parent_sha=None, status="rejected", score=None, reason="slow regex")

    files = sorted(f.path for f in lin.client.list_artifacts(leg, "harnesses"))
    assert files == [path, f"harnesses/{SHA_B[:12]}-rejected.yaml"]
    record, text = lin.read_harness(leg, path)
    assert text == HARNESS
    assert record == {
        "sha": SHA_A,
        "name": "plain-sum",
        "status": "accepted",
        "score": 0.625,
        "parent": SHA_B,
        "reason": None,
    }
    rejected, _ = lin.read_harness(leg, f"harnesses/{SHA_B[:12]}-rejected.yaml")
    assert rejected["reason"] == "slow regex"
    assert rejected["score"] is None
    # every text is a version of the run's prompt, its record as tags; no truncated run tags any more
    assert not [k for k in lin.client.get_run(leg).data.tags if k.startswith("whale.harness.")]
    name = mlflow_registry.prompt_name("wr-harness")
    versions = {pv.tags["whale.sha"]: pv for pv in lin.client.search_prompt_versions(name)}
    assert set(versions) == {SHA_A, SHA_B}  # logged twice, registered once
    assert versions[SHA_A].template == HARNESS
    assert versions[SHA_A].tags["whale.status"] == "accepted"
    assert versions[SHA_A].tags["whale.score"] == "0.6250"
    assert versions[SHA_A].tags["whale.parent"] == SHA_B
    assert versions[SHA_B].tags["whale.reason"] == "slow regex"
    assert lin.client.get_prompt_version_by_alias(name, "incumbent").tags["whale.sha"] == SHA_A
    assert lin.harness_prompt("wr-harness", SHA_A) == f"prompts:/{name}/{versions[SHA_A].version}"
    with pytest.raises(ValueError, match="harness status"):
        lin.log_harness(leg, SHA_A, HARNESS, name="x", parent_sha=None, status="bad status", score=None)
    with pytest.raises(ValueError, match="not a WHALE harness artifact"):
        parse_harness_artifact(HARNESS)


def test_checkpoints_are_tagged_logged_models_with_a_parent_chain(lin: Lineage, tmp_path: Path) -> None:
    parent = lin.ensure_run("wr-ckpt", "run-ckpt", {})
    leg1 = lin.ensure_leg(parent, "wr-ckpt", 1, "weights")
    leg2 = lin.ensure_leg(parent, "wr-ckpt", 2, "weights")
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    (ckdir / "adapter_config.json").write_text('{"r": 16}')
    (ckdir / "adapter_model.safetensors").write_bytes(b"\0" * 128)

    root = lin.log_checkpoint(
        leg1, ckdir, checkpoint_id="ck-root", harness_sha=SHA_A, parent_checkpoint_id=None, step=0
    )
    child = lin.log_checkpoint(leg2, ckdir, checkpoint_id="ck-child", harness_sha=SHA_B, parent_checkpoint_id="ck-root")
    again = lin.log_checkpoint(leg2, ckdir, checkpoint_id="ck-child", harness_sha=SHA_B, parent_checkpoint_id="ck-root")
    assert again == child != root

    models = lin.checkpoints_of("wr-ckpt")
    assert [m.model_id for m in models] == [root, child]
    by_ckpt = {m.tags["whale.checkpoint_id"]: m for m in models}
    assert by_ckpt["ck-child"].tags["whale.harness_sha"] == SHA_B
    assert by_ckpt["ck-child"].tags["whale.run_id"] == "wr-ckpt"
    assert by_ckpt["ck-child"].source_run_id == leg2
    assert by_ckpt["ck-child"].params["whale.harness_sha"] == SHA_B  # params: what the UI's model page shows
    assert by_ckpt["ck-root"].params["whale.parent_checkpoint_id"] == "none"
    assert str(by_ckpt["ck-child"].status) == "READY"
    # walk the chain from the newest checkpoint to the root
    chain, cur = [], by_ckpt["ck-child"]
    while True:
        chain.append(cur.tags["whale.checkpoint_id"])
        parent_id = cur.tags.get("whale.parent_checkpoint_id")
        if parent_id is None:
            break
        cur = by_ckpt[parent_id]
    assert chain == ["ck-child", "ck-root"]
    # the parent checkpoint is the leg run's model input
    assert [m.model_id for m in lin.client.get_run(leg2).inputs.model_inputs] == [root]
    names = sorted(f.path for f in lin.client.list_logged_model_artifacts(child))
    assert "adapter_config.json" in names
    assert "adapter_model.safetensors" in names
    with pytest.raises(FileNotFoundError, match="checkpoint directory"):
        lin.log_checkpoint(leg1, tmp_path / "nope", checkpoint_id="x", harness_sha=SHA_A, parent_checkpoint_id=None)


def test_figure_and_text_artifacts(lin: Lineage, tmp_path: Path) -> None:
    run = lin.ensure_run("wr-fig", "run-fig", {})
    fig = metric_curve_figure(
        [(0, 0.38), (512, 0.45), (1024, 0.44), (1536, 0.57)],
        [(0, "weights"), (512, "harness"), (1024, "weights")],
        metric="val exact match",
    )
    ax = fig.axes[0]
    assert len(ax.lines) == 4  # the curve + three leg boundaries
    assert sorted(t.get_text() for t in ax.texts) == ["harness", "weights", "weights"]
    lin.log_figure(run, fig, "figures/metric_curve.png")
    png = tmp_path / "local.png"
    fig.savefig(png)
    lin.log_figure(run, png, "figures/copy.png")
    lin.log_text(run, "# report\n", "report.md")

    files = {f.path: f.file_size for f in lin.client.list_artifacts(run, "figures")}
    assert set(files) == {"figures/metric_curve.png", "figures/copy.png"}
    assert all(size and size > 1000 for size in files.values())
    local = lin.client.download_artifacts(run, "figures/metric_curve.png", str(tmp_path))
    assert Path(local).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [f.path for f in lin.client.list_artifacts(run) if not f.is_dir] == ["report.md"]
    with pytest.raises(FileNotFoundError):
        lin.log_figure(run, tmp_path / "missing.png", "x.png")


def test_filter_values_with_quotes_are_refused(lin: Lineage) -> None:
    with pytest.raises(ValueError, match="quote"):
        lin.runs_of("it's")
    with pytest.raises(ValueError, match="run status"):
        lin.end("whatever", "DONE")


def test_experiment_opens_on_its_runs(lin: Lineage) -> None:
    """The experiment kind makes the MLflow UI open the experiment on its runs; an existing experiment gets it too."""
    exp = lin.client.get_experiment(lin.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    lin.client.delete_experiment_tag(lin.experiment_id, "mlflow.experimentKind")
    again = Lineage(lin.tracking_uri, experiment="whale-test")
    assert again.client.get_experiment(lin.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    run = lin.ensure_run("wr-url", "run-url", {})
    assert lin.run_url(run, "http://127.0.0.1:5123") == (
        f"http://127.0.0.1:5123/#/experiments/{lin.experiment_id}/runs/{run}"
    )


def test_checkpoint_links_its_harness_prompt_and_carries_its_scores(lin: Lineage, tmp_path: Path) -> None:
    """The checkpoint's Logged Model links the prompt version of the harness it was trained under, holds its
    val and test scores with the splits as datasets, and the final one is a registered version aliased final."""
    parent = lin.ensure_run("wr-final", "run-final", {}, tags={"whale.suite": "arith", "whale.model": "/m/tiny"})
    leg = lin.ensure_leg(parent, "wr-final", 0, "weights")
    lin.log_harness(leg, SHA_A, HARNESS, name="plain-sum", parent_sha=None, status="trained-against", score=0.25)
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    (ckdir / "adapter_config.json").write_text("{}")
    model_id = lin.log_checkpoint(leg, ckdir, checkpoint_id="ck-final", harness_sha=SHA_A, parent_checkpoint_id=None)
    uri = lin.harness_prompt("wr-final", SHA_A)
    model = lin.client.get_logged_model(model_id)
    assert uri is not None and model.tags["whale.harness_prompt"] == uri
    assert model.tags["mlflow.linkedPrompts"] == f'[{{"name": "wr-final-harness", "version": "{uri[-1]}"}}]'

    split = {"suite": "arith", "split": "val", "n": 48, "seed": 0, "config": {"name": "arith"}}
    ds = lin.log_split(leg, split)
    assert lin.log_split(leg, split).digest == ds.digest  # the same split: one input
    assert [d.dataset.name for d in lin.client.get_run(leg).inputs.dataset_inputs] == ["arith-val"]
    lin.log_metrics(leg, {"val_score": 0.5}, step=1, model_id=model_id, dataset=ds)
    (metric,) = lin.client.get_logged_model(model_id).metrics
    assert (metric.key, metric.value, metric.dataset_name, metric.step) == ("val_score", 0.5, "arith-val", 1)

    lin.log_harness(parent, SHA_A, HARNESS, name="plain-sum", parent_sha=None, status="final", score=0.5,
                    test_score=0.4)  # fmt: skip
    record, _ = lin.read_harness(parent, f"harnesses/{SHA_A[:12]}-final.yaml")
    assert (record["score"], record["test_score"]) == (0.5, 0.4)
    version = lin.register_final(parent, model_id, {"whale.test_score": "0.4000"})
    assert lin.register_final(parent, model_id, {"whale.test_score": "0.4000"}) == version  # no second version
    mv = lin.client.get_model_version_by_alias("whale-arith-tiny", "final")
    assert (mv.version, mv.tags["whale.run_id"], mv.tags["whale.test_score"]) == (int(version), "wr-final", "0.4000")
    assert [o.model_id for o in lin.client.get_run(parent).outputs.model_outputs] == [model_id]
    pv = lin.client.get_prompt_version_by_alias("wr-final-harness", "final")
    assert (pv.tags["whale.status"], pv.tags["whale.test_score"]) == ("final", "0.4000")


def test_leaderboard_is_a_table_written_once(lin: Lineage) -> None:
    run = lin.ensure_run("wr-board", "run-board", {})
    rows = [
        {"sha12": "a" * 12, "status": "incumbent", "val_score": 0.5, "prompt_tokens": 12.0, "reason": ""},
        {"sha12": "b" * 12, "status": "lost", "val_score": 0.25, "prompt_tokens": None, "reason": "halved"},
    ]
    assert lin.log_leaderboard(run, rows)
    assert not lin.log_leaderboard(run, rows)  # log_table would append: a re-recorded leg keeps its table
    local = lin.client.download_artifacts(run, "leaderboard.json")
    import json

    table = json.loads(Path(local).read_text())
    assert table["columns"] == ["sha12", "status", "val_score", "prompt_tokens", "reason"]
    assert [r[0] for r in table["data"]] == ["a" * 12, "b" * 12]


def test_a_truncated_mlflow_store_is_one_clear_error(tmp_path: Path) -> None:
    """Issue 30, item 11: a truncated ``mlflow.db`` made ``whale resume`` end in a ``DatabaseError`` traceback (a
    corrupt ``whale.db`` already got a clean line). Now a `LineageError` (a `WhaleError`: the CLI's one line) says
    what to do."""
    from whale_core.errors import WhaleError
    from whale_core.records.lineage import Lineage, LineageError

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    Lineage(uri, "whale")
    db = tmp_path / "mlflow.db"
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 40)
    with pytest.raises(LineageError) as err:
        Lineage(uri, "whale")
    assert isinstance(err.value, WhaleError)
    assert "cannot be opened" in str(err.value) and "move it aside" in str(err.value)
