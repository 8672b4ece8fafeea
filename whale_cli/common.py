"""What the ``whale`` commands share: their common options, the console, loading a suite, harness and policy, a
rollout with a progress bar, the model check and Prefect server start before a flow, and a fresh run directory.

Heavy modules (torch, transformers, Prefect, MLflow, rich's widgets) are imported inside the helpers, never at module
level, so that ``whale --help`` stays fast.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from whale_cli.guard import CliError

__all__ = [
    "ConfigOpt",
    "DataOpt",
    "DeviceOpt",
    "HarnessOpt",
    "ModelOpt",
    "SeedOpt",
    "SetOpt",
    "SuiteOpt",
    "check_model",
    "console",
    "fail",
    "load_harness",
    "load_policy_with_status",
    "load_suite",
    "progress_rollout",
    "run_dir",
    "start_prefect_server",
]

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="'tiny' (ships with WHALE), an installed model's name (`whale models install NAME`) or a local Hugging "
        "Face model directory (with config.json)",
    ),
]
SuiteOpt = Annotated[str, typer.Option("--suite", "-s", help="arith | sort | jsonl | pkg.module:Class")]
HarnessOpt = Annotated[
    Path | None, typer.Option("--harness", help="harness YAML file (default: the suite's seed harness)")
]
DataOpt = Annotated[Path | None, typer.Option("--data", help="JSONL file for --suite jsonl")]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed for suites, demos, sampling and training")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto | cpu | cuda | cuda:N | mps (refused if not present)")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (see `whale config`)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override, e.g. --set weights.steps=200 (repeatable)")]


def console() -> Any:
    from rich.console import Console

    return Console()


def fail(msg: str) -> NoReturn:
    raise CliError(msg)


def load_suite(name: str, data: Path | None, seed: int) -> Any:
    from whale_core.suites import SuiteConfig
    from whale_core.suites import load_suite as load

    return load(SuiteConfig(name=name, seed=seed, path=str(data) if data else None))


def load_harness(path: Path | None, suite: Any) -> Any:
    """The harness in ``path``, or the suite's seed harness when no path is given."""
    from whale_core.harness import Harness

    if path is None:
        return Harness.from_text(suite.seed_harness)
    if not path.is_file():
        fail(f"harness file not found: {path}")
    return Harness.from_file(path)


def load_policy_with_status(model: str, device: str, adapter: str | None = None) -> Any:
    from whale_core.models.policy import load_policy

    with console().status(f"loading model '{model}'…"):
        return load_policy(model, adapter=adapter, device=device)


def progress_rollout(
    policy: Any, harness: Any, suite: Any, problems: Any, *, batch_size: int, seed: int, split: str
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from whale_core.rollout import rollout

    with Progress(
        "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task(f"{split} rollouts", total=len(problems))
        return rollout(
            policy,
            harness,
            suite,
            problems,
            batch_size=batch_size,
            seed=seed,
            split=split,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )


def check_model(cfg: Any) -> None:
    """The config's model, adapter and device, checked before a flow starts (a typo: one error line, no failed run)."""
    from whale_core.models.policy import check_model as check

    check(cfg.model.name, cfg.model.device, cfg.model.adapter)


def start_prefect_server() -> None:
    """Start the temporary Prefect server (when no server is configured) now, before anything imports Prefect, so
    that it boots while the command imports and preloads (see flows/prefect_server.py)."""
    from flows.prefect_server import start

    start()


def run_dir(kind: str) -> Path:
    """A new directory ``$WHALE_HOME/runs/<kind>-<YYYYmmdd-HHMMSS>`` for this command alone. The name has a
    one-second resolution, so the directory is claimed with an atomic ``mkdir`` (no ``exist_ok``): a second command
    started in the same second gets ``…-HHMMSS-2`` (then ``-3``, …) instead of writing into the first one's."""
    from whale_core.env import whale_home

    root = whale_home() / "runs"
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    for i in itertools.count(1):
        d = root / (stem if i == 1 else f"{stem}-{i}")
        try:
            d.mkdir()
        except FileExistsError:
            continue
        return d
    raise AssertionError("unreachable")  # itertools.count() never ends
