"""``whale-scheduled``: what a deployment runs on its schedule or a work-pool worker picks up — a fresh WHALE run
from a config file (on the worker) and ``--set``-style overrides. It is the entrypoint of ``infra/prefect.yaml`` and
of ``whale deploy``."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.whale_run import start_run
from whale_core.config import load_config


@flow(name="whale-scheduled", validate_parameters=False)
def scheduled_run(config_path: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    from whale_core.env import setup_offline_env

    setup_offline_env()
    return start_run(load_config(config_path, overrides or []))
