"""``whale config``: print the full configuration (defaults filled in) that ``--config``/``--set`` change."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def config_cmd(
    config: Annotated[Path | None, typer.Option(help="YAML config to validate and print in full")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override, e.g. weights.steps=200")] = None,
) -> None:
    """Print the full configuration (defaults filled in) — copy it to a file, edit, pass it with `--config`."""
    from whale_core.config import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(config, set_ or [])))
