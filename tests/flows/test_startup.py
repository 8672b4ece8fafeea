"""`flows.startup.prepare`: the temporary Prefect server boots during the preload and is the one the run then uses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from flow_helpers import REPO, make_home, python

from flows.startup import _start_server, prepare
from whale_core.config import WhaleConfig

SCRIPT = """
import json, sys
from whale_core.env import setup_offline_env
setup_offline_env()  # as the CLI does before anything imports Prefect (its start-up timeout among them)
from flows import prefect_server
if sys.argv[1] == "early":
    prefect_server.start()  # as the `whale` commands do, before importing the flows
from flows.startup import prepare
from whale_core.config import WhaleConfig
from whale_core.records.refs import PolicyRef, load_cached
from prefect.client.orchestration import get_client

cfg = WhaleConfig()
report = prepare(cfg)
preloaded = load_cached(PolicyRef.base(cfg.model.name, cfg.model.device))
client = get_client(sync_client=True)
health = client.api_healthcheck()
server = prefect_server.current()
print("RESULT" + json.dumps({
    "server_seconds": report.server_seconds,
    "steps": sorted(report.steps),
    "skipped": report.skipped,
    "client_url": str(client.api_url).rstrip("/"),
    "server_url": server.api_url if server else None,
    "server_alive": server is not None and server.process.poll() is None,
    "prefects_own_server_imported": "prefect.server.api.server" in sys.modules,
    "health_error": None if health is None else str(health),
    "policy_reused": preloaded is load_cached(PolicyRef.base(cfg.model.name, cfg.model.device)),
}))
"""


@pytest.mark.parametrize("when", ["early", "in_prepare"])
def test_prepare_waits_for_whales_server_which_the_run_then_uses(tmp_path: Path, models_dir: Path, when: str) -> None:
    """Started by the command before the flows are imported ("early", the CLI) or by `prepare` itself (the Python
    API): the process's Prefect client talks to that server and never imports Prefect's server package."""
    env = make_home(tmp_path, models_dir)  # fresh PREFECT_HOME, no PREFECT_API_URL: a temporary server is needed
    out = python(env, "-c", SCRIPT, when, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    res = json.loads(line[len("RESULT") :])
    assert res["skipped"] == {}
    assert res["steps"] == ["imports", "mlflow_store", "policy", "suite"]
    assert res["server_seconds"] is not None and res["server_seconds"] > 0
    assert res["server_alive"] is True
    assert res["client_url"] == res["server_url"]
    assert res["prefects_own_server_imported"] is False  # 3.7 s of CPU and ~90 MB the run process no longer pays
    assert res["health_error"] is None
    assert res["policy_reused"] is True
    assert (Path(env["WHALE_HOME"]) / "mlflow.db").is_file()  # the MLflow store was opened (migrated) up front
    assert (Path(env["PREFECT_HOME"]) / "temporary-server.log").is_file()


def test_prepare_skips_what_fails_and_preloads_heavy_parts_only_while_a_server_boots(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("flows.startup.uses_temporary_server", lambda: False)
    cfg = WhaleConfig.model_validate({"model": {"name": "/nonexistent/model-dir"}})
    with caplog.at_level("WARNING", logger="whale.startup"):
        report = prepare(cfg)
    assert report.server_seconds is None
    assert sorted(report.steps) == ["mlflow_store", "suite"]  # no server to overlap with: no torch, no policy
    assert report.skipped == {}
    monkeypatch.setattr("flows.startup.uses_temporary_server", lambda: True)
    monkeypatch.setattr("flows.prefect_server.start", lambda: None)  # WHALE's unusable here: Prefect's own
    failing = lambda out, *_: out.update(error=OSError("no port"), seconds=0.1)  # noqa: E731
    monkeypatch.setattr("flows.startup._start_server", failing)
    with caplog.at_level("WARNING", logger="whale.startup"):
        report = prepare(cfg)
    assert "policy" in report.skipped and "nonexistent" in report.skipped["policy"]
    assert report.skipped["server"] == "OSError: no port"
    assert "imports" not in report.skipped and "suite" not in report.skipped
    assert any("preload policy skipped" in r.getMessage() for r in caplog.records)


def test_prepare_for_a_cached_rerun_preloads_nothing_heavy_even_while_a_server_boots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[bool] = []
    monkeypatch.setattr("flows.startup.uses_temporary_server", lambda: True)
    monkeypatch.setattr("flows.prefect_server.start", lambda: None)
    monkeypatch.setattr("flows.startup._start_server", lambda out, *_: started.append(True) or out.update(seconds=0.2))
    cfg = WhaleConfig.model_validate({"model": {"name": "/nonexistent/model-dir"}})
    report = prepare(cfg, compute=False)
    assert started == [True]  # the server still boots early
    assert report.server_seconds == pytest.approx(0.2)
    assert sorted(report.steps) == ["mlflow_store", "suite"]  # no torch imports, no policy load
    assert report.skipped == {}


def test_a_server_start_that_times_out_leaves_no_process_behind(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.server.api.server import SubprocessASGIServer

    started: list[subprocess.Popen[bytes]] = []
    real = SubprocessASGIServer._run_uvicorn_command

    def recording(self: SubprocessASGIServer) -> subprocess.Popen[bytes]:
        proc = real(self)
        started.append(proc)
        return proc

    monkeypatch.setattr(SubprocessASGIServer, "_run_uvicorn_command", recording)
    monkeypatch.setattr(SubprocessASGIServer, "_instances", {})
    for key, value in make_home(tmp_path, models_dir).items():
        monkeypatch.setenv(key, value)
    out: dict[str, object] = {}
    _start_server(out, timeout=1)  # no Prefect server comes up within 1 s here
    assert isinstance(out.get("error"), RuntimeError) and "Timed out" in str(out["error"])
    assert started, "Prefect did not start a server process"
    for proc in started:
        assert proc.poll() is not None, "the timed-out server process is still running"
    assert SubprocessASGIServer._instances == {}  # the next start begins clean


TEMPLATE_SCRIPT = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING)
logging.getLogger("whale.db_templates").setLevel(logging.DEBUG)
from whale_core.env import setup_offline_env
setup_offline_env()
from flows.startup import prepare
from whale_core.config import WhaleConfig
from prefect import flow

report = prepare(WhaleConfig(), compute=False)

@flow(name="probe")
def probe() -> int:
    return 7

print("RESULT" + json.dumps({"skipped": report.skipped, "value": probe.with_options(flow_run_name=sys.argv[1])()}))
"""


def test_a_new_home_starts_from_the_prefect_template_the_first_home_saved(tmp_path: Path, models_dir: Path) -> None:
    """The first new home migrates Prefect's database and saves it (before any flow run) as the machine's template;
    the next new home starts its temporary server on a copy (no migrations, no block registration), runs a flow, and
    sees nothing of the first home."""
    import sqlite3

    cache = tmp_path / "cache"
    homes = []
    for name in ("home1", "home2"):
        (tmp_path / name).mkdir()
        env = make_home(tmp_path / name, models_dir) | {"WHALE_CACHE_DIR": str(cache)}
        out = subprocess.run([sys.executable, "-c", TEMPLATE_SCRIPT, f"run-of-{name}"], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        res = json.loads(next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))[len("RESULT") :])
        assert res == {"skipped": {}, "value": 7}
        homes.append((Path(env["PREFECT_HOME"]) / "prefect.db", out.stderr))

    (db1, log1), (db2, log2) = homes
    templates = sorted(p.name for p in (cache / "db-templates").glob("*.db"))
    assert [t.split("-")[0] for t in templates] == ["mlflow", "prefect"]
    assert "as the database template" in log1 and "seeded from" not in log1
    assert "seeded from" in log2 and "as the database template" not in log2

    def query(path: Path, sql: str) -> list[tuple[object, ...]]:
        with sqlite3.connect(path) as con:
            return con.execute(sql).fetchall()

    template = next((cache / "db-templates").glob("prefect-*.db"))
    assert query(template, "SELECT count(*) FROM flow_run") == [(0,)]  # saved before the first home's run
    assert query(template, "SELECT count(*) FROM block_type")[0][0] > 0  # Prefect's block registry came along
    assert query(db1, "SELECT name FROM flow_run") == [("run-of-home1",)]
    assert query(db2, "SELECT name FROM flow_run") == [("run-of-home2",)]  # nothing of home1
    version = "SELECT version_num FROM alembic_version"
    assert query(db2, version) == query(db1, version)
    # the copy carries the block registry of the same Prefect and collections: home2's server did not register again
    # (registering rewrites every block type's `updated` time)
    blocks = "SELECT name, slug, updated FROM block_type ORDER BY slug"
    assert query(db2, blocks) == query(template, blocks) == query(db1, blocks)
