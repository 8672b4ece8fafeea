"""``whale-scheduled``: what a deployment runs on its schedule — a fresh WHALE run with the deployment's config."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.whale_run import start_run
from whale_core.config import WhaleConfig


@flow(name="whale-scheduled", validate_parameters=False)
def scheduled_run(config: dict[str, Any]) -> dict[str, Any]:
    return start_run(WhaleConfig.model_validate(config))
