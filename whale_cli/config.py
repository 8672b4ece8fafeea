"""``whale config``: print the full configuration (defaults filled in) that ``--config``/``--set`` change, or with
``--explain`` every key with its type, default and description (generated from the pydantic models)."""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import ConfigOpt, SetOpt, resolve_config


def config_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="list every key: dotted name, type (bounds), default, description")
    ] = False,
) -> None:
    """Print the full configuration (defaults filled in) — copy it to a file, edit, pass it with `--config`.

    `--explain` lists every key instead (with `--config`/`--set`, the defaults column still shows the schema's).
    """
    if explain:
        from whale_core.config import describe

        resolve_config(config, set_)  # a file or --set given with --explain is still checked
        for doc in describe():
            indent = "  " * doc.key.count(".")
            default = "" if doc.section and doc.default != "null" else f" = {doc.default}"
            typer.echo(f"{indent}{doc.key}: {doc.type}{default}")
            typer.echo(f"{indent}    {doc.description or '(no description)'}")
        return
    from whale_core.config import config_to_yaml

    typer.echo(config_to_yaml(resolve_config(config, set_)))
