"""A moved home opens and shows its artifacts (issue #20 "Done when"): a real small run, its home moved with
`shutil.move`, then MLflow relocated (`whale_core.records.portable`), a real ``mlflow server`` over the moved home
serving a harness artifact and a Logged Model's file, ``whale runs`` listing the run, ``whale resume`` getting every
task back ``Cached``, and the summary's reproduce line scoring the final pair as the run did."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import SMALL, make_home, mlflow_client, mlflow_runs, now, python, task_states, whale

pytestmark = pytest.mark.slow

RESUME = "import sys\nfrom flows.whale_run import resume_run\nresume_run(sys.argv[1])\n"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:  # 127.0.0.1 only
        return bytes(r.read())


def test_a_moved_home_opens_and_shows_its_artifacts(tmp_path: Path, models_dir: Path) -> None:
    from mlflow_ui import mlflow_server

    from whale_core.records.portable import relocate_mlflow_store

    (tmp_path / "a").mkdir()
    env = make_home(tmp_path / "a", models_dir)
    sets = [x for item in SMALL for x in ("--set", item)]
    res = whale(env, "run", "--run-id", "mv", *sets)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    old = Path(env["WHALE_HOME"])
    summary = json.loads((old / "runs" / "mv" / "summary.json").read_text())
    assert Path(summary["final_harness_file"]).is_file() and "--split test" in summary["reproduce"]

    home = tmp_path / "b" / "home"
    home.parent.mkdir()
    shutil.move(old, home)
    env = {**env, "WHALE_HOME": str(home), "PREFECT_HOME": str(home / "prefect")}
    assert relocate_mlflow_store(home) > 0
    assert relocate_mlflow_store(home) == 0

    # MLflow over the moved home: a harness text of a leg run and a checkpoint's file, through the server
    runs = mlflow_runs(home, "mv")
    client = mlflow_client(home)
    holder, art = next(
        (r, a.path) for r in runs for a in client.list_artifacts(r.info.run_id, "harnesses") if a.path.endswith(".yaml")
    )
    exp_id = runs[0].info.experiment_id
    models = client.search_logged_models(experiment_ids=[exp_id], filter_string="tags.`whale.run_id` = 'mv'")
    assert models
    with mlflow_server(f"sqlite:///{home / 'mlflow.db'}", home / "mlartifacts", tmp_path / "server.log") as url:
        q = urllib.parse.urlencode({"run_uuid": holder.info.run_id, "path": art})
        text = _get(f"{url}/get-artifact?{q}").decode()
        assert "whale_harness" in text
        served = [
            json.loads(_get(f"{url}/ajax-api/2.0/mlflow/logged-models/{m.model_id}/artifacts/files?artifact_file_path=whale_checkpoint.json"))
            for m in models
        ]  # fmt: skip
        assert {s["id"] for s in served} == {m.tags["whale.checkpoint_id"] for m in models}

    out = whale({**env, "COLUMNS": "200"}, "runs")
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if "mv" in line)
    assert f"{summary['test_initial']:.3f} → {summary['test_final']:.3f}" in row

    since = now()
    out = python(env, "-c", RESUME, "mv", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    leaves = [s for s in task_states(env, since) if not s["name"].startswith("block-ascent-iteration")]
    assert leaves and {s["state"] for s in leaves} == {"Cached"}, leaves

    # the resumed run rewrote its outputs for the new home; the reproduce line scores the final pair as the run did
    again: dict[str, Any] = json.loads((home / "runs" / "mv" / "summary.json").read_text())
    assert again["final_harness_file"].startswith(str(home.resolve()))
    assert again["final_adapter"] is None or Path(again["final_adapter"]).is_dir()
    args = shlex.split(again["reproduce"])
    assert args[:2] == ["whale", "eval"]
    ev = python(env, "-m", "whale_cli", *args[1:], timeout=600)
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:]
    score = float(re.search(r"score (\d\.\d+)", ev.stdout).group(1))  # type: ignore[union-attr]
    assert score == pytest.approx(again["test_final"], abs=5e-5), (score, again["test_final"], sys.version)
