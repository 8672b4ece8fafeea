"""infra/: the compose file and prefect.yaml are consistent; the local servers script and the production path work.

Fast checks parse ``infra/docker-compose.yml``, ``infra/.env.example`` and ``infra/prefect.yaml`` (Docker is not
runnable here). Slow checks run real servers on 127.0.0.1: ``infra/local_servers.sh`` start/stop with a Lineage
round trip through the MLflow server, MLflow with a ``postgresql://`` backend store, and a Prefect server on Postgres
with Redis messaging running a tiny flow. Postgres databases and the Redis db index are throw-away and removed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from servers import free_port as _free_port
from servers import stop_group as _stop_group
from servers import wait_healthy as _wait_healthy

from whale_core.records.lineage import Lineage

REPO = Path(__file__).resolve().parents[1]
INFRA = REPO / "infra"
BIN = Path(sys.executable).parent
PG = "postgres@127.0.0.1:5432"
SHA = "e" * 64


# ------------------------------------------------------------------------------------------------------ helpers
def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((INFRA / "docker-compose.yml").read_text()))


def _env_example() -> dict[str, str]:
    out = {}
    for line in (INFRA / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example line without '=': {line!r}"
            out[key.strip()] = value.strip()
    return out


# ------------------------------------------------------------------------------------------------------ compose
def test_compose_has_the_production_services_wired_consistently() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"postgres", "redis", "minio", "prefect-server", "prefect-worker", "mlflow"} <= set(services)
    declared_volumes = set(compose.get("volumes") or {})
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep in deps:
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0]
            if source.startswith("."):
                assert (INFRA / source).exists(), f"{name} mounts missing file {source}"
            else:
                assert source in declared_volumes, f"{name} uses undeclared volume {source}"
        build = svc.get("build")
        if build:
            assert (INFRA / build["context"] / build["dockerfile"]).is_file()

    prefect_env = services["prefect-server"]["environment"]
    assert prefect_env["PREFECT_SERVER_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://")
    assert "@postgres:5432/prefect" in prefect_env["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert prefect_env["PREFECT_MESSAGING_BROKER"] == "prefect_redis.messaging"
    assert prefect_env["PREFECT_MESSAGING_CACHE"] == "prefect_redis.messaging"
    assert prefect_env["PREFECT_REDIS_MESSAGING_HOST"] == "redis"
    assert "prefect-redis" in prefect_env["EXTRA_PIP_PACKAGES"]

    mlflow = services["mlflow"]
    cmd = " ".join(mlflow["command"])
    assert "--backend-store-uri=postgresql+psycopg2://" in cmd  # SQLAlchemy 2.1: bare postgresql:// is psycopg 3
    assert "@postgres:5432/mlflow" in cmd
    assert "--artifacts-destination=s3://" in cmd
    assert mlflow["environment"]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert mlflow["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert {"postgres", "minio-init"} <= set(mlflow["depends_on"])
    assert {"prefect-server", "mlflow"} <= set(services["prefect-worker"]["depends_on"])
    # the databases the services use are the ones the init script creates (whale is POSTGRES_DB)
    init = (INFRA / "postgres-init.sh").read_text()
    assert re.search(r"for db in prefect mlflow", init)
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "whale"
    # every published port is on the loopback interface
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_env_example_covers_the_compose_variables_and_points_at_published_ports() -> None:
    text = (INFRA / "docker-compose.yml").read_text()
    env = _env_example()
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", text))
    assert required == {"POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD"}
    assert used <= set(env), f"compose variables missing from .env.example: {sorted(used - set(env))}"
    for key in ("WHALE_DB_URL", "MLFLOW_TRACKING_URI", "PREFECT_API_URL", "MLFLOW_S3_ENDPOINT_URL"):
        assert env[key].startswith(("http://127.0.0.1:", "postgresql+psycopg2://")), key
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
    assert env["AWS_SECRET_ACCESS_KEY"] == env["MINIO_ROOT_PASSWORD"]
    assert f":{env['POSTGRES_PASSWORD']}@127.0.0.1:{env['POSTGRES_PORT']}/whale" in env["WHALE_DB_URL"]
    assert env["MLFLOW_TRACKING_URI"].endswith(f":{env['MLFLOW_PORT']}")
    assert env["PREFECT_API_URL"].endswith(f":{env['PREFECT_PORT']}/api")
    assert env["MLFLOW_S3_ENDPOINT_URL"].endswith(f":{env['MINIO_PORT']}")


def test_prefect_yaml_deploys_whale_run_to_the_compose_pool() -> None:
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.client.schemas.schedules import CronSchedule

    raw = yaml.safe_load((INFRA / "prefect.yaml").read_text())
    model = PrefectYamlModel.model_validate(raw)
    by_name = {d.name: d for d in model.deployments}
    assert set(by_name) == {"whale-run-nightly", "whale-run-local"}
    import inspect

    from flows.scheduled import scheduled_run

    accepted = set(inspect.signature(scheduled_run.fn).parameters)
    for dep in by_name.values():
        assert dep.entrypoint == "flows/scheduled.py:scheduled_run"
        assert set(dep.parameters) <= accepted, "prefect.yaml parameters must match the flow's signature"
    nightly = by_name["whale-run-nightly"]
    assert nightly.work_pool is not None
    assert nightly.work_pool.name == _env_example()["WHALE_WORK_POOL"]
    assert nightly.work_pool.name in _compose()["services"]["prefect-worker"]["environment"]["WHALE_WORK_POOL"]
    cron = raw["deployments"][0]["schedules"][0]
    assert CronSchedule(cron=cron["cron"], timezone=cron["timezone"]).cron == "0 3 * * *"
    assert raw["pull"][0]["prefect.deployments.steps.set_working_directory"]["directory"] == "/opt/whale"
    assert "WORKDIR /opt/whale" in (INFRA / "Dockerfile").read_text()


def test_the_image_installs_whale_with_its_postgres_extra() -> None:
    """The compose services reach Postgres with psycopg2 (WHALE_DB_URL, MLflow's backend store): the image installs
    WHALE's own `postgres` extra, pinned by constraints.txt, not a driver of its own choosing."""
    install = [ln for ln in (INFRA / "Dockerfile").read_text().splitlines() if "pip install -c constraints.txt" in ln]
    assert len(install) == 1 and '".[postgres]"' in install[0], install
    assert "pip install -c constraints.txt -e '.[postgres]'" in (INFRA / "README.md").read_text()


# ------------------------------------------------------------------------------------------------- local servers
def test_local_servers_script_syntax_and_usage() -> None:
    script = INFRA / "local_servers.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    bad = subprocess.run([str(script), "bogus"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert "usage" in bad.stderr


@pytest.mark.slow
def test_local_servers_start_serve_lineage_and_stop(tmp_path: Path) -> None:
    script = INFRA / "local_servers.sh"
    ports = {"WHALE_PREFECT_PORT": str(_free_port()), "WHALE_MLFLOW_PORT": str(_free_port())}
    env = {k: v for k, v in os.environ.items() if k not in {"PREFECT_HOME", "MLFLOW_TRACKING_URI", "PREFECT_API_URL"}}
    env.update(ports, WHALE_HOME=str(tmp_path), WHALE_BIN=str(BIN))
    try:
        started = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True, timeout=400)
        assert started.returncode == 0, started.stdout + started.stderr
        mlflow_url = f"http://127.0.0.1:{ports['WHALE_MLFLOW_PORT']}"
        assert f"export MLFLOW_TRACKING_URI={mlflow_url}" in started.stdout
        assert f"export PREFECT_API_URL=http://127.0.0.1:{ports['WHALE_PREFECT_PORT']}/api" in started.stdout
        assert (tmp_path / "prefect").is_dir()  # PREFECT_HOME under WHALE_HOME

        # client/server mode: the artifacts go through the server's proxy into $WHALE_HOME/mlartifacts
        lin = Lineage(mlflow_url, experiment="whale-local-servers")
        run = lin.ensure_run("ls-run", "ls-run", {"seed": 1})
        path = lin.log_harness(run, SHA, "whale_harness: 1\n", name="h", parent_sha=None, status="seed", score=0.2)
        assert lin.read_harness(run, path)[0]["score"] == 0.2
        assert list((tmp_path / "mlartifacts").rglob(Path(path).name))
        assert lin.ensure_run("ls-run", "ls-run", {"seed": 1}) == run
    finally:
        stopped = subprocess.run([str(script), "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert "prefect: stopped" in stopped.stdout
    assert "mlflow: stopped" in stopped.stdout
    assert not list((tmp_path / "servers").glob("*.pid"))
    status = subprocess.run([str(script), "status"], env=env, capture_output=True, text=True, timeout=30)
    assert status.stdout.split() == ["prefect:", "stopped", "mlflow:", "stopped"]


# ---------------------------------------------------------------------------------------------- production path
@pytest.fixture
def pg_database() -> Iterator[str]:
    """A throw-away Postgres database on 127.0.0.1:5432 (trust auth); dropped afterwards."""
    import psycopg2

    name = f"whale_t_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(f"postgresql://{PG}/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_lineage_on_a_postgres_backend_store(pg_database: str, tmp_path: Path) -> None:
    # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg (v3), which is not installed: name the psycopg2 driver
    uri = f"postgresql+psycopg2://{PG}/{pg_database}"
    lin = Lineage(uri, experiment="whale-pg", artifact_location=(tmp_path / "art").as_uri())
    parent = lin.ensure_run("pg-run", "pg-run", {"weights": {"lr": 5e-5}, "proposer": {"api_key": "sk-x"}})
    leg = lin.ensure_leg(parent, "pg-run", 1, "weights")
    path = lin.log_harness(leg, SHA, "whale_harness: 1\n", name="h", parent_sha=None, status="accepted", score=0.5)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "adapter_config.json").write_text("{}")
    model = lin.log_checkpoint(leg, ckpt, checkpoint_id="pg-ck", harness_sha=SHA, parent_checkpoint_id=None, step=1)

    again = Lineage(uri, experiment="whale-pg")
    assert again.ensure_run("pg-run", "pg-run", {}) == parent
    assert again.ensure_leg(parent, "pg-run", 1, "weights") == leg
    assert [r.info.run_id for r in again.runs_of("pg-run")] == [parent, leg]
    assert again.client.get_run(parent).data.params == {"weights.lr": "5e-05", "proposer.api_key": "***"}
    assert again.read_harness(leg, path)[0]["status"] == "accepted"
    [found] = again.checkpoints_of("pg-run")
    assert found.model_id == model
    assert found.tags["whale.harness_sha"] == SHA


def _free_redis_db() -> int:
    import redis

    for db in range(15, 7, -1):
        if redis.Redis(host="127.0.0.1", port=6379, db=db).dbsize() == 0:
            return db
    pytest.fail("no empty Redis db index in 8..15 on 127.0.0.1:6379")


FLOW = textwrap.dedent(
    """
    import json
    from prefect import flow, task

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @flow(name="whale-infra-check")
    def check() -> int:
        return add.submit(2, 3).result()

    state = check(return_state=True)
    print(json.dumps({"id": str(state.state_details.flow_run_id), "type": state.type.value,
                      "result": state.result()}))
    """
)


@pytest.mark.slow
@pytest.mark.postgres
def test_prefect_server_on_postgres_with_redis_messaging(pg_database: str, tmp_path: Path) -> None:
    import psycopg2
    import redis

    db = _free_redis_db()
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    server_env = dict(
        base,
        PREFECT_HOME=str(tmp_path / "prefect-server"),
        PREFECT_SERVER_DATABASE_CONNECTION_URL=f"postgresql+asyncpg://{PG}/{pg_database}",
        PREFECT_MESSAGING_BROKER="prefect_redis.messaging",
        PREFECT_MESSAGING_CACHE="prefect_redis.messaging",
        PREFECT_SERVER_EVENTS_CAUSAL_ORDERING="prefect_redis.ordering",
        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE="prefect_redis.lease_storage",
        PREFECT_REDIS_MESSAGING_HOST="127.0.0.1",
        PREFECT_REDIS_MESSAGING_PORT="6379",
        PREFECT_REDIS_MESSAGING_DB=str(db),
        PREFECT_SERVER_DOCKET_URL=f"redis://127.0.0.1:6379/{db}",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
    )
    log = tmp_path / "prefect-server.log"
    cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=server_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(f"{api}/health", proc, log)
        client_env = dict(base, PREFECT_API_URL=api, PREFECT_HOME=str(tmp_path / "prefect-client"))
        client_env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
        done = subprocess.run(
            [sys.executable, "-c", FLOW], env=client_env, capture_output=True, text=True, timeout=180, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        record = json.loads(done.stdout.strip().splitlines()[-1])
        assert record["type"] == "COMPLETED"
        assert record["result"] == 5

        # the server stored the run in Postgres ...
        conn = psycopg2.connect(f"postgresql://{PG}/{pg_database}")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT state_type FROM flow_run WHERE id = %s", (record["id"],))
                assert cur.fetchone() == ("COMPLETED",)
        finally:
            conn.close()
        # ... and its messaging went through Redis
        keys = redis.Redis(host="127.0.0.1", port=6379, db=db).keys("*")
        assert keys, "no Redis keys: the server did not use prefect_redis messaging"
    finally:
        _stop_group(proc)
        redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()
