"""What the ``whale`` commands share: the settings rule (`ALIASES`: each short flag is one config key;
`resolve_config`: flags > --set > --config > defaults), their common options, the console, loading a suite, harness
and policy, a rollout with a progress bar, the model check and Prefect server start before a flow, and a fresh run
directory.

Heavy modules (torch, transformers, Prefect, MLflow, rich's widgets) are imported inside the helpers, never at module
level, so that ``whale --help`` stays fast.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from whale_cli.guard import CliError

__all__ = [
    "ALIASES",
    "PRECEDENCE",
    "AdapterFlag",
    "Alias",
    "ApiBaseFlag",
    "BatchSizeFlag",
    "CandidatesFlag",
    "ConfigOpt",
    "DataFlag",
    "DeviceFlag",
    "HarnessFlag",
    "ModeFlag",
    "ModelFlag",
    "ProposerFlag",
    "SeedFlag",
    "SetOpt",
    "StepsFlag",
    "SuiteFlag",
    "ValProblemsFlag",
    "alias_option",
    "check_model",
    "console",
    "fail",
    "load_harness",
    "load_policy_with_status",
    "load_suite_from",
    "progress_rollout",
    "refuse_adapter",
    "resolve_config",
    "run_dir",
    "start_prefect_server",
]


# ------------------------------------------------------------------------------------ settings: one schema, one rule
@dataclass(frozen=True)
class Alias:
    """A command-line flag that is only another spelling of one config key: ``--model X`` == ``--set model.name=X``.
    ``help`` ends with the key's default (a test checks it against the schema)."""

    key: str
    flags: tuple[str, ...]
    help: str


# parameter name (as the commands spell it) -> the config key it sets. The one table: a command that offers one of
# these flags declares the parameter with the matching *Flag type below and hands it to `resolve_config` by name.
ALIASES: dict[str, Alias] = {
    "model": Alias(
        "model.name",
        ("--model", "-m"),
        "'tiny' (ships with WHALE), an installed model's name (`whale models install NAME`) or a local Hugging Face "
        "model directory (with config.json); default: tiny",
    ),
    "suite": Alias("suite.name", ("--suite", "-s"), "arith | sort | jsonl | pkg.module:Class; default: arith"),
    "data": Alias("suite.path", ("--data",), "JSONL file for --suite jsonl; default: null"),
    "harness": Alias("harness", ("--harness",), "harness YAML file; default: null (the suite's seed harness)"),
    "seed": Alias(
        "seed",
        ("--seed",),
        "run seed: sampling, demos, training (and in eval/train the problems, unless suite.seed is set); default: 0",
    ),
    "device": Alias(
        "model.device", ("--device",), "auto | cpu | cuda | cuda:N | mps (refused if not present); default: auto"
    ),
    "adapter": Alias("model.adapter", ("--adapter",), "LoRA adapter / checkpoint dir; default: null"),
    "batch_size": Alias("rollout.batch_size", ("--batch-size",), "generation batch size; default: 64"),
    "steps": Alias("weights.steps", ("--steps",), "GRPO steps; default: 300"),
    "val_problems": Alias(
        "rollout.val_problems",
        ("-n",),
        "val problems scored (train: before and after); default: 200 (whale train: 500)",
    ),
    "mode": Alias(
        "mode",
        ("--mode",),
        "whale-adaptive | whale-fixed | weights-only | harness-only | prompt-weights; default: whale-fixed",
    ),
    "proposer": Alias(
        "search.proposer",
        ("--proposer",),
        "'mutate' or 'tpe' (offline), served:NAME (a local model) or a litellm model, e.g. openai/gpt-4o-mini; "
        "default: mutate",
    ),
    "api_base": Alias("search.api_base", ("--api-base",), "OpenAI-compatible base URL for the proposer; default: null"),
    "candidates": Alias("search.candidates", ("-k", "--candidates"), "candidates to propose; default: 8"),
}

PRECEDENCE = (
    "Settings come from one schema (`whale config --explain` lists every key): a flag such as `--model X` is the "
    "same as `--set model.name=X`. Precedence, highest first: flag > `--set` > `--config` file > defaults."
)


def alias_option(name: str, **kwargs: Any) -> Any:
    """The Typer option of the alias flag ``name`` (flags and help from `ALIASES`; ``kwargs``: bounds)."""
    alias = ALIASES[name]
    return typer.Option(*alias.flags, help=f"{alias.help} [config key: {alias.key}]", **kwargs)


# alias flags: None = not given (the config decides)
ModelFlag = Annotated[str | None, alias_option("model")]
SuiteFlag = Annotated[str | None, alias_option("suite")]
DataFlag = Annotated[Path | None, alias_option("data")]
HarnessFlag = Annotated[Path | None, alias_option("harness")]
SeedFlag = Annotated[int | None, alias_option("seed")]
DeviceFlag = Annotated[str | None, alias_option("device")]
AdapterFlag = Annotated[str | None, alias_option("adapter")]
BatchSizeFlag = Annotated[int | None, alias_option("batch_size", min=1)]
StepsFlag = Annotated[int | None, alias_option("steps", min=1)]
ValProblemsFlag = Annotated[int | None, alias_option("val_problems", min=1)]
ModeFlag = Annotated[str | None, alias_option("mode")]
ProposerFlag = Annotated[str | None, alias_option("proposer")]
ApiBaseFlag = Annotated[str | None, alias_option("api_base")]
CandidatesFlag = Annotated[int | None, alias_option("candidates", min=1, max=64)]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (`whale config` prints one, `--explain` every key)"),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="KEY=VALUE config override, e.g. --set weights.steps=200 (repeatable; value is YAML)"),
]


def resolve_config(
    config: Path | None, sets: list[str] | None, *, defaults: Mapping[str, Any] | None = None, **flags: Any
) -> Any:
    """The command's `WhaleConfig`. ``flags``: alias flags by their `ALIASES` name (None = not given). Precedence,
    highest first: flags > ``--set`` (in order) > the ``--config`` file > ``defaults`` (the command's own default
    for a key, dotted key -> value; a `whale_core.config.Follows` copies another key) > the schema's defaults."""
    from whale_core.config import load_config

    given = {ALIASES[name].key: str(v) if isinstance(v, Path) else v for name, v in flags.items() if v is not None}
    return load_config(config, list(sets or []), flags=given, defaults=defaults)


_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character (but newline and tab) and every bidirectional override written as a
    visible escape (``\\x1b``, ``\\u202e``): text from a proposer, a file or a user cannot move the cursor, recolour
    the terminal or reorder what is shown."""
    return _INVISIBLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def console() -> Any:
    """The console every command prints through: the one place untrusted text is rendered. Markup is off: text that
    came from a proposer, a file or a user (a harness name, a rejection reason, an error) prints literally — ``[/x]``
    is those four characters, never a style or a `MarkupError`; its control characters print as escapes (`visible`),
    whatever renders them (a line, a table cell, a progress line). Styling is explicit: `styled` pieces."""
    from rich.console import Console
    from rich.segment import Segment

    class LiteralConsole(Console):
        def _render_buffer(self, buffer: Any) -> str:  # rich's one join of what is printed
            return str(super()._render_buffer(s if s.control else Segment(visible(s.text), s.style) for s in buffer))

    return LiteralConsole(markup=False)


def styled(text: str, style: str) -> Any:
    """``text`` in a rich ``style`` ("bold", "bold green", ...), literal whatever it holds (see `console`)."""
    from rich.text import Text

    return Text(text, style=style)


def line(*parts: Any) -> Any:
    """One printed line from plain strings and `styled` pieces, each literal."""
    from rich.text import Text

    return Text.assemble(*parts)


def fail(msg: str) -> NoReturn:
    raise CliError(msg)


def load_suite_from(cfg: Any) -> Any:
    """The suite a `SuiteConfig` (the config's ``suite`` section) names."""
    from whale_core.suites import load_suite as load

    return load(cfg)


def load_harness(path: str | Path | None, suite: Any) -> Any:
    """The harness in ``path``, or the suite's seed harness when no path is given."""
    from whale_core.harness import Harness

    if path is None:
        return Harness.from_text(suite.seed_harness)
    return Harness.from_file(path)  # the one rule for a file a user names: whale_core.user_files


def load_policy_with_status(model: str, device: str, adapter: str | None = None) -> Any:
    from whale_core.models.policy import load_policy

    with console().status(styled(f"loading model '{model}'…", "")):
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


def refuse_adapter(cfg: Any, command: str) -> None:
    """``model.adapter`` is read by `whale eval` only; a command that starts from the base model refuses it rather
    than ignore it."""
    if cfg.model.adapter is not None:
        fail(
            f"model.adapter is read only by `whale eval`; `{command}` starts from the base model (model.name): "
            "remove model.adapter"
        )


def check_model(cfg: Any, command: str = "whale run") -> None:
    """The config's model and device, checked before a flow starts (a typo: one error line, no failed run)."""
    from whale_core.models.policy import check_model as check

    refuse_adapter(cfg, command)
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


def leg_engine(cfg: Any, command: str, record: dict[str, Any]) -> Any:
    """The engine of a one-leg command (``whale search``, ``whale train``) in this process: the config's suite,
    harness (a file, or the suite's seed) and base model (loaded once, with a status line), a new run directory
    ``runs/<command>-<time>`` that is also the archive run's id (its ``record`` is the config it stores), and the
    engine's calls in process (`whale_core.ascent.local.LocalCalls`: no orchestrator)."""
    from whale_core.ascent.engine import BlockAscent
    from whale_core.ascent.local import LocalCalls
    from whale_core.records.archive import Archive
    from whale_core.records.recorder import Recorder, create_run
    from whale_core.records.refs import HarnessRef, PolicyRef, load_cached

    suite = load_suite_from(cfg.suite)
    harness = load_harness(cfg.harness, suite)
    with console().status(styled(f"loading model '{cfg.model.name}'…", "")):
        base = PolicyRef.base(cfg.model.name, cfg.model.device)
        load_cached(base)
    out_dir = run_dir(command)
    archive = Archive()
    create_run(archive, out_dir.name, command, record)
    rec = Recorder(archive, run_id=out_dir.name)
    calls = LocalCalls(cfg, suite, out_dir)
    return BlockAscent(cfg, calls, rec, suite=suite, run_dir=out_dir, base=base, seed_harness=HarnessRef.of(harness))
