"""``whale ui``: the MLflow UI on 127.0.0.1 over the embedded store (and where the Prefect UI is)."""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import console
from whale_core.env import setup_offline_env


def ui_cmd(
    port: Annotated[int, typer.Option(min=1, max=65535, help="MLflow UI port on 127.0.0.1")] = 5000,
) -> None:
    """Start the MLflow UI on 127.0.0.1 over the embedded store (and print how to reach the Prefect UI)."""
    import os
    import subprocess

    home = setup_offline_env()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home / 'mlflow.db'}"
    con = console()
    con.print(f"MLflow UI: http://127.0.0.1:{port} (store {uri})")
    con.print(f"Prefect UI: `PREFECT_HOME={home / 'prefect'} prefect server start` → http://127.0.0.1:4200")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    subprocess.run(
        [
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            uri,
            "--artifacts-destination",
            str(home / "mlartifacts"),
        ],
        env=env,
        check=False,
    )
