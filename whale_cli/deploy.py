"""``whale deploy``: serve the whole run (`flows.scheduled`) as a Prefect deployment on a cron schedule."""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import ConfigOpt, SetOpt, console, refuse_adapter, resolve_config
from whale_core.env import setup_offline_env


def deploy_cmd(
    cron: Annotated[str, typer.Option(help="cron schedule, e.g. '0 3 * * *' (nightly at 03:00)")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "whale-nightly",
) -> None:
    """Serve `whale_run` as a Prefect deployment on a cron schedule (long-running; needs a Prefect server:
    `infra/local_servers.sh` or PREFECT_API_URL). Each scheduled run gets a fresh run id."""
    setup_offline_env()
    refuse_adapter(resolve_config(config, set_), "whale deploy")  # validate now, not at 03:00
    from flows.scheduled import scheduled_run

    console().print(f"serving deployment '{name}' with cron '{cron}' (Ctrl-C stops)")
    params = {"config_path": str(config.resolve()) if config else None, "overrides": list(set_ or [])}
    scheduled_run.serve(name=name, cron=cron, parameters=params)
