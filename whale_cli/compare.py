"""``whale compare``: every mode x seed under the same budget (`flows.compare`), then a comparison report and a
summary table; the same ``--id`` resumes."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

import typer

from whale_cli.common import (
    ConfigOpt,
    SetOpt,
    check_model,
    console,
    fail,
    line,
    resolve_config,
    start_prefect_server,
    styled,
)
from whale_core.env import setup_offline_env


def new_compare_id() -> str:
    """``cmp-<YYYYmmdd-HHMMSS>-<6 hex>``: unique, since a compare started with an existing id resumes it (two started
    in the same second must not share one)."""
    return f"cmp-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def compare_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    modes: Annotated[str, typer.Option(help="'all' or a comma list, e.g. whale-adaptive,harness-only")] = "all",
    seeds: Annotated[int, typer.Option(min=1, help="seeds per mode (run seeds config.seed .. config.seed+N-1)")] = 3,
    sweep_phase: Annotated[
        str | None, typer.Option(help="whale-fixed phase lengths to sweep, e.g. 1,2,4,8 (phase.weights=phase.harness)")
    ] = None,
    compare_id: Annotated[
        str | None, typer.Option("--id", help="comparison id; the same id resumes (default: generated)")
    ] = None,
    matrix: Annotated[bool, typer.Option("--matrix/--no-matrix", help="compute the robustness matrix")] = True,
    matrix_n: Annotated[int | None, typer.Option(min=1, help="test problems per robustness-matrix cell")] = None,
    equal_spend: Annotated[
        bool,
        typer.Option(
            "--equal-spend",
            help="every mode may spend the whole budget: no iteration cap (iterations=null); a run ends when the "
            "budget is spent or after schedule.stop_patience legs (default 3) without a val gain, recorded as a stop",
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Prefect's, MLflow's and the libraries' log lines on the console")
    ] = False,
) -> None:
    """Run every mode x seed under the same budget and write a comparison report (bar chart, training curves with
    leg switches, budget per leg, phase sweep, robustness matrix) under $WHALE_HOME/compare/ID, also in MLflow.

    A failed run is reported, not fatal; re-running with the same `--id` resumes (finished runs are reused).
    Examples: `whale compare --modes all --seeds 3 --equal-spend --id cmp1` (every mode spends the budget);
    `whale compare --modes whale-adaptive --sweep-phase 1,2,4,8 --equal-spend --set weights.steps=100
    --set budget.total=70000` (each phase length alternates at least twice, or the sweep is refused).
    The coupling check: add `--set search.mutate_wording=paraphrase`.
    """
    import shlex
    import sys

    setup_offline_env()
    from pydantic import ValidationError

    from whale_core.science.compare import (
        CompareError,
        CompareSpec,
        check_sweep,
        equal_spend_overrides,
        parse_ints,
        parse_modes,
    )

    if equal_spend:
        set_ = equal_spend_overrides(set_ or [])
    cfg = resolve_config(config, set_)
    check_model(cfg, "whale compare")
    matrix_cfg: dict[str, Any] = {"enabled": matrix}
    if matrix_n is not None:
        matrix_cfg["test_problems"] = matrix_n
    try:
        spec = CompareSpec(
            modes=parse_modes(modes),
            seeds=[cfg.seed + i for i in range(seeds)],
            sweep_phase=parse_ints(sweep_phase, "--sweep-phase") if sweep_phase else [],
            matrix=matrix_cfg,  # type: ignore[arg-type]
        )
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    try:
        check_sweep(cfg, spec.sweep_phase)
    except CompareError as exc:
        fail(str(exc))
    cid = compare_id or new_compare_id()
    command = shlex.join(["whale", *sys.argv[1:]]) if sys.argv[1:2] == ["compare"] else ""
    if command and "--id" not in sys.argv:
        command += f" --id {cid}"
    start_prefect_server()
    from flows.compare import start_compare

    con = console()
    con.print(
        f"whale compare {cid}: modes={','.join(spec.modes)} seeds={spec.seeds} "
        f"sweep={spec.sweep_phase or '-'} budget={cfg.budget.total} model={cfg.model.name}"
    )
    t0 = time.perf_counter()
    request = {"config": config.read_text() if config else None, "set": sorted(set_ or [])}
    from flows.compare import compare_dir
    from whale_cli.progress import run_console

    log = compare_dir(cid) / "whale.log"
    with run_console(con, log, verbose):  # progress and result lines here; everything else to the log file
        summary = start_compare(cfg, spec, cid, command=command, request=request)
    from rich.table import Table

    from whale_core.science.compare import RunOutcome, aggregate

    outcomes = [RunOutcome(**o) for o in summary["outcomes"]]
    table = Table("variant", "seeds ok", "failed", "test (mean ± sd)")
    for s in aggregate(outcomes):
        table.add_row(s.label, str(s.n), str(s.failed), f"{s.mean:.4f} ± {s.sd:.4f}" if s.n else "—")
    con.print(table)
    for o in outcomes:
        if not o.ok:
            con.print(line(styled("failed", "yellow"), f" {o.run_id}: {o.error}"))
    if summary.get("matrix_error"):
        con.print(line(styled("robustness matrix failed:", "yellow"), f" {summary['matrix_error']}"))
    con.print(f"report: {summary['report']} ({time.perf_counter() - t0:.0f}s)")
    if not verbose:
        con.print(f"log: {log}", soft_wrap=True, highlight=False)
