"""``whale run``, ``whale resume``, ``whale rerun``: whole runs through the Prefect flows (`flows.whale_run`), each
ending with the run's summary (test scores before and after, legs, report, where to look next)."""

from __future__ import annotations

import signal
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
    styled,
)
from whale_core.env import setup_offline_env

VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Prefect's, MLflow's and the libraries' log lines on the console too")
]


def print_summary(summary: dict[str, Any]) -> None:
    """The run's end: scores and budget as rich tables, the legs, where the outputs and the lineage are."""
    from rich.table import Table

    from whale_core.env import whale_home

    con = console()
    con.rule(f"WHALE run {summary['run_id']} ({summary['mode']})")
    scores = Table("", "initial", "final", "change", caption="initial: base model and seed harness")
    for split, a, b, n in (
        ("test", summary["test_initial"], summary["test_final"], summary.get("test_n")),
        ("val", summary.get("val_initial"), summary.get("val_final"), None),
    ):
        if a is not None and b is not None:
            label = f"{split} score (n={n})" if n else f"{split} score"
            scores.add_row(label, f"{a:.4f}", styled(f"{b:.4f}", "bold green"), f"{b - a:+.4f}")
    con.print(scores)
    budget = summary.get("budget") or {}
    by_kind = dict(budget.get("by_kind") or {})
    spent = Table("", *by_kind, "spent", "budget")
    spent.add_row("rollouts", *(str(v) for v in by_kind.values()), str(sum(by_kind.values())), str(budget.get("total")))
    con.print(spent)
    con.print(f"legs: {' → '.join(summary['legs']) or 'none'}", soft_wrap=True, highlight=False)
    # paths, URLs and commands below the table, each on one line however narrow the console (no wrapping mid-path)
    for key, label in (
        ("final_harness_file", "final harness"),
        ("final_adapter", "final adapter"),
        ("report", "report"),
        ("log", "log"),
        ("reproduce", "reproduce"),
        ("mlflow_url", "MLflow run"),
        ("prefect_url", "Prefect flow run"),
    ):
        if key == "final_adapter" and key in summary and summary[key] is None:
            con.print(f"{label}: none (the base model)", soft_wrap=True, highlight=False)
        elif summary.get(key):
            con.print(f"{label}: {summary[key]}", soft_wrap=True, highlight=False)
    con.print(
        f"UIs: `whale ui` (MLflow), `whale ui --prefect` (Prefect, PREFECT_HOME={whale_home() / 'prefect'}); "
        f"resume or rerun: `whale resume {summary['run_id']}`, `whale rerun {summary['run_id']} --iteration N`",
        soft_wrap=True,
        highlight=False,
    )


def _run(summary_of: Any, run_id: str, verbose: bool) -> None:
    """Run ``summary_of()`` under the run's console (progress lines; the rest to runs/<id>/whale.log) and print
    its summary."""
    from whale_cli.progress import run_console
    from whale_core.env import whale_home

    log = whale_home() / "runs" / run_id / "whale.log"
    try:
        with run_console(console(), log, verbose):
            summary = summary_of()
    except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, SIGTERM: one line, and the run is resumable
        if isinstance(exc, SystemExit) and exc.code != 128 + signal.SIGTERM:
            raise
        from whale_cli.guard import print_error

        kept = f"what it finished is kept: `whale resume {run_id}` continues it"
        print_error(f"interrupted: run {run_id} stopped; {kept}")
        raise typer.Exit(130 if isinstance(exc, KeyboardInterrupt) else 128 + signal.SIGTERM) from None
    except Exception as exc:  # a full disk, a read-only file system: the guard's line, and how to go on
        from whale_cli.guard import environment_cause, print_error

        cause = environment_cause(exc)
        if cause is None:
            raise
        print_error(f"{cause}: free space, then `whale resume {run_id}` continues the run (what it finished is kept)")
        raise typer.Exit(2) from None
    if not verbose:
        summary = {**summary, "log": str(log)}
    print_summary(summary)


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
    verbose: VerboseOpt = False,
) -> None:
    """Run WHALE end to end: alternate harness search and GRPO under one rollout budget, evaluate on test, report.

    With no arguments this is the embedded default: the built-in tiny model, the `arith` suite, the offline `mutate`
    proposer, an ephemeral Prefect server, SQLite archive and MLflow under $WHALE_HOME. Everything is resumable
    (`whale resume RUN`). Example: `whale run --set iterations=6 --set search.proposer=openai/gpt-4o-mini`
    """
    from whale_core.records.run_ids import check_run_id

    if run_id is not None:
        check_run_id(run_id)  # before anything starts or is created
    setup_offline_env()
    start_prefect_server()  # first: it boots while the config, the flows and the preload are imported
    cfg = resolve_config(config, set_, mode=mode, model=model, suite=suite, harness=harness, seed=seed, device=device)
    check_model(cfg, "whale run")
    from flows.whale_run import new_run_id, start_run

    rid = run_id or new_run_id(cfg)
    console().print(
        f"whale run {rid}: mode={cfg.mode} model={cfg.model.name} suite={cfg.suite.name} "
        f"proposer={cfg.search.proposer} iterations={cfg.iterations or 'until-spent'} budget={cfg.budget.total}",
        highlight=False,
        soft_wrap=True,
    )
    _run(lambda: start_run(cfg, rid), rid, verbose)


def resume_cmd(
    run: Annotated[str, typer.Argument(help="run id (see `whale runs`)")], verbose: VerboseOpt = False
) -> None:
    """Continue a stopped or crashed run: completed tasks come back Cached; MLflow runs are re-attached."""
    from whale_core.records.run_ids import check_run_id

    check_run_id(run)
    setup_offline_env()
    start_prefect_server()
    from flows.whale_run import resume_run

    _run(lambda: resume_run(run), run, verbose)


def rerun_cmd(
    run: Annotated[str, typer.Argument(help="run id")],
    iteration: Annotated[int, typer.Option("--iteration", "-i", help="iteration whose leg to recompute")],
    verbose: VerboseOpt = False,
) -> None:
    """Recompute one iteration's leg (e.g. after a failure or a fix) and whatever depends on it; nothing else."""
    from whale_core.records.run_ids import check_run_id

    check_run_id(run)
    setup_offline_env()
    start_prefect_server()
    from flows.whale_run import rerun_iteration

    _run(lambda: rerun_iteration(run, iteration), run, verbose)
