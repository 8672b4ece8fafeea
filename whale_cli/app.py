"""The ``whale`` Typer app: every command registered on one root group, and the console-script entry point `main`.

Each command lives in its own module (see `whale_cli`); they import only Typer and `whale_cli.common` at module level,
heavy libraries (torch, transformers, Prefect, MLflow) inside the command, so that ``whale --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import PRECEDENCE
from whale_cli.compare import compare_cmd
from whale_cli.config import config_cmd
from whale_cli.deploy import deploy_cmd
from whale_cli.eval import eval_cmd
from whale_cli.guard import GuardedGroup
from whale_cli.models import models_app
from whale_cli.run import rerun_cmd, resume_cmd, run_cmd
from whale_cli.runs import runs_cmd
from whale_cli.search import search_cmd
from whale_cli.train import train_cmd
from whale_cli.ui import ui_cmd

__all__ = ["app", "main"]

app = typer.Typer(
    cls=GuardedGroup,  # every command's user errors: one line, exit 2 (whale_cli.guard)
    help=(
        "WHALE jointly optimizes an LLM's weights (GRPO + LoRA) and its harness (the prompt template, few-shot "
        "demos, answer format, parsing and inference policy) by alternating block ascent.\n\n"
        "Start with `whale run` (a complete small run on the built-in tiny model and the `arith` suite), or try the "
        "pieces: `whale eval`, `whale train`, `whale search`. Everything is stored under $WHALE_HOME (./.whale)."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,
)
app.add_typer(models_app, name="models")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"whale {version('whale')}")
        except PackageNotFoundError:
            typer.echo("whale (version unknown: the package is not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print WHALE's version and exit")
    ] = False,
) -> None:
    """WHALE's root options."""


# the order of `whale --help`; the commands that resolve a config (--config/--set) show the precedence rule
app.command("eval", epilog=PRECEDENCE)(eval_cmd)
app.command("train", epilog=PRECEDENCE)(train_cmd)
app.command("search", epilog=PRECEDENCE)(search_cmd)
app.command("run", epilog=PRECEDENCE)(run_cmd)
app.command("resume")(resume_cmd)
app.command("rerun")(rerun_cmd)
app.command("runs")(runs_cmd)
app.command("deploy", epilog=PRECEDENCE)(deploy_cmd)
app.command("ui")(ui_cmd)
app.command("config", epilog=PRECEDENCE)(config_cmd)
app.command("compare", epilog=PRECEDENCE)(compare_cmd)


def main() -> None:
    """Console-script entry point (SIGTERM and exit handling: `whale_core.process`)."""
    from whale_core.process import run_cli

    run_cli(app)


if __name__ == "__main__":
    main()
