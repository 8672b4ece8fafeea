"""``whale run``, ``whale resume``, ``whale rerun``: whole runs through the Prefect flows (`flows.whale_run`), each
ending with the run's summary (test scores before and after, legs, report, where to look next)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from whale_cli.common import (
    ConfigOpt,
    DeviceFlag,
    HarnessFlag,
    ModeFlag,
    ModelFlag,
    SeedFlag,
    SetOpt,
    SuiteFlag,
    check_model,
    console,
    resolve_config,
    start_prefect_server,
)
from whale_core.env import setup_offline_env


def print_summary(summary: dict[str, Any]) -> None:
    from whale_core.env import whale_home

    con = console()
    con.rule(f"WHALE run {summary['run_id']} ({summary['mode']})")
    con.print(
        f"test score: initial (base model, seed harness) [bold]{summary['test_initial']:.4f}[/] → final "
        f"(trained model, final harness) [bold green]{summary['test_final']:.4f}[/] "
        f"({summary['test_final'] - summary['test_initial']:+.4f}, n={summary['test_n']})"
    )
    con.print(f"legs: {' → '.join(summary['legs'])}; budget {summary['budget']}")
    con.print(f"report: {summary['report']}")
    con.print(
        f"lineage: `whale ui` then open http://127.0.0.1:5000 (MLflow, experiment 'whale'); "
        f"Prefect UI: `PREFECT_HOME={whale_home() / 'prefect'} prefect server start` → http://127.0.0.1:4200"
    )
    con.print(f"resume or rerun: `whale resume {summary['run_id']}`, `whale rerun {summary['run_id']} --iteration N`")


def run_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    mode: ModeFlag = None,
    model: ModelFlag = None,
    suite: SuiteFlag = None,
    harness: HarnessFlag = None,
    seed: SeedFlag = None,
    device: DeviceFlag = None,
    run_id: Annotated[str | None, typer.Option(help="run id (default: generated)")] = None,
) -> None:
    """Run WHALE end to end: alternate harness search and GRPO under one rollout budget, evaluate on test, report.

    With no arguments this is the embedded default: the built-in tiny model, the `arith` suite, the offline `mutate`
    proposer, an ephemeral Prefect server, SQLite archive and MLflow under $WHALE_HOME. Everything is resumable
    (`whale resume RUN`). Example: `whale run --set iterations=6 --set search.proposer=openai/gpt-4o-mini`
    """
    setup_offline_env()
    start_prefect_server()  # first: it boots while the config, the flows and the preload are imported
    cfg = resolve_config(config, set_, mode=mode, model=model, suite=suite, harness=harness, seed=seed, device=device)
    check_model(cfg, "whale run")
    from flows.whale_run import start_run

    console().print(
        f"[bold]whale run[/] mode={cfg.mode} model={cfg.model.name} suite={cfg.suite.name} "
        f"proposer={cfg.search.proposer} iterations={cfg.iterations} budget={cfg.budget.total}"
    )
    print_summary(start_run(cfg, run_id))


def resume_cmd(run: Annotated[str, typer.Argument(help="run id (see `whale runs`)")]) -> None:
    """Continue a stopped or crashed run: completed tasks come back Cached; MLflow runs are re-attached."""
    setup_offline_env()
    start_prefect_server()
    from flows.whale_run import resume_run

    print_summary(resume_run(run))


def rerun_cmd(
    run: Annotated[str, typer.Argument(help="run id")],
    iteration: Annotated[int, typer.Option("--iteration", "-i", help="iteration whose leg to recompute")],
) -> None:
    """Recompute one iteration's leg (e.g. after a failure or a fix) and whatever depends on it; nothing else."""
    setup_offline_env()
    start_prefect_server()
    from flows.whale_run import rerun_iteration

    print_summary(rerun_iteration(run, iteration))
