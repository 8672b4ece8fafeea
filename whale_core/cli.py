"""The ``whale`` command line: one entry point, lazy heavy imports, rich progress on long work.

Single legs (no orchestration): ``whale eval``, ``whale train`` (a weights leg), ``whale search`` (a harness leg).
Whole runs through Prefect + MLflow: ``whale run``, ``whale resume``, ``whale rerun``, ``whale deploy``, ``whale ui``,
``whale compare``. ``whale config`` prints the full default configuration that ``--config``/``--set`` change.
User errors are one line, ``error: <message>``, exit code 2 (`whale_core.cli_guard`).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from whale_core.cli_guard import CliError, GuardedGroup
from whale_core.cli_models import models_app
from whale_core.env import setup_offline_env

app = typer.Typer(
    cls=GuardedGroup,  # every command's user errors: one line, exit 2 (cli_guard)
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


def _console() -> Any:
    from rich.console import Console

    return Console()


def _fail(msg: str) -> NoReturn:
    raise CliError(msg)


def _suite(name: str, data: Path | None, seed: int) -> Any:
    from whale_core.suites import SuiteConfig, load_suite

    return load_suite(SuiteConfig(name=name, seed=seed, path=str(data) if data else None))


def _harness(path: Path | None, suite: Any) -> Any:
    from whale_core.harness import Harness

    if path is None:
        return Harness.from_text(suite.seed_harness)
    if not path.is_file():
        _fail(f"harness file not found: {path}")
    return Harness.from_file(path)


def _policy(model: str, device: str, adapter: str | None = None) -> Any:
    from whale_core.models.policy import load_policy

    with _console().status(f"loading model '{model}'…"):
        return load_policy(model, adapter=adapter, device=device)


def _progress_rollout(
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


def _new_compare_id() -> str:
    """``cmp-<YYYYmmdd-HHMMSS>-<6 hex>``: unique, since a compare started with an existing id resumes it (two started
    in the same second must not share one)."""
    return f"cmp-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _check_model(cfg: Any) -> None:
    """The config's model, adapter and device, checked before a flow starts (a typo: one error line, no failed run)."""
    from whale_core.models.policy import check_model

    check_model(cfg.model.name, cfg.model.device, cfg.model.adapter)


def _start_prefect_server() -> None:
    """Start the temporary Prefect server (when no server is configured) now, before anything imports Prefect, so
    that it boots while the command imports and preloads (see flows/prefect_server.py)."""
    from flows.prefect_server import start

    start()


def _run_dir(kind: str) -> Path:
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


@app.command("eval")
def eval_cmd(
    model: ModelOpt = "tiny",
    suite: SuiteOpt = "arith",
    harness: HarnessOpt = None,
    data: DataOpt = None,
    split: Annotated[str, typer.Option(help="val | test | train")] = "val",
    n: Annotated[int | None, typer.Option("-n", min=1, help="evaluate the first N problems of the split")] = None,
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter / checkpoint dir")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="generation batch size")] = 64,
    out: Annotated[Path | None, typer.Option(help="traces JSONL path (default under $WHALE_HOME/runs/)")] = None,
    seed: SeedOpt = 0,
    device: DeviceOpt = "auto",
) -> None:
    """Score a (model, harness) pair on a suite split; print the score and write per-example traces (JSONL).

    Example: `whale eval --model tiny --suite arith --harness my.yaml -n 500`
    """
    setup_offline_env()
    if split not in ("train", "val", "test"):
        _fail(f"--split must be one of train, val, test (got {split!r})")
    s = _suite(suite, data, seed)
    h = _harness(harness, s)
    problems = list(s.problems(split))[:n]
    policy = _policy(model, device, adapter)
    result = _progress_rollout(policy, h, s, problems, batch_size=batch_size, seed=seed, split=split)
    path = out or _run_dir("eval") / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write_jsonl(path)
    con = _console()
    con.print(f"harness [bold]{h.name}[/] ({h.sha[:12]}) on {suite}/{split}: n={result.n}")
    con.print(
        f"[bold green]score {result.score:.4f}[/]  ({result.completions} completions, "
        f"{result.prompt_tokens / max(result.n, 1):.1f} prompt tokens/problem, {result.seconds:.1f}s)"
    )
    con.print(f"traces: {path}")


@app.command("train")
def train_cmd(
    model: ModelOpt = "tiny",
    suite: SuiteOpt = "arith",
    harness: HarnessOpt = None,
    data: DataOpt = None,
    steps: Annotated[int | None, typer.Option(min=1, help="GRPO steps (default: weights.steps)")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override, e.g. weights.learning_rate=1e-4")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML config (its `weights:` section is used)")] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="val problems for the before/after score")] = 500,
    seed: SeedOpt = 0,
    device: DeviceOpt = "auto",
) -> None:
    """Run one weights leg (GRPO on prompts the harness renders) and report the val score before and after.

    Example: `whale train --model tiny --suite arith --harness reversed.yaml --steps 300`
    """
    setup_offline_env()
    from whale_core.config import load_config
    from whale_core.weights import train_weights_leg

    overrides = list(set_ or [])
    if steps is not None:
        overrides.append(f"weights.steps={steps}")
    cfg = load_config(config, overrides)
    s = _suite(suite, data, seed)
    h = _harness(harness, s)
    problems = list(s.problems("val"))[:n]
    policy = _policy(model, device)
    before = _progress_rollout(policy, h, s, problems, batch_size=cfg.rollout.batch_size, seed=seed, split="val")
    out_dir = _run_dir("train")
    con = _console()
    con.print(f"before: val score {before.score:.4f} (n={before.n}); training {cfg.weights.steps} steps → {out_dir}")
    with con.status("GRPO…"):
        leg = train_weights_leg(policy, h, s, cfg.weights.model_copy(update={"seed": seed}), out_dir=out_dir)
    from whale_core.models.policy import load_policy

    trained = (
        load_policy(model, adapter=str(leg.checkpoint.path), device=device)
        if leg.checkpoint.is_lora
        else load_policy(str(leg.checkpoint.path), device=device)
    )
    after = _progress_rollout(trained, h, s, problems, batch_size=cfg.rollout.batch_size, seed=seed, split="val")
    con.print(
        f"[bold]val score {before.score:.4f} → {after.score:.4f}[/] ({after.score - before.score:+.4f}, n={after.n}); "
        f"{leg.completions} completions in {leg.seconds:.0f}s; checkpoint {leg.checkpoint.path}"
    )
    (out_dir / "summary.json").write_text(
        json.dumps(
            {
                "before": before.score,
                "after": after.score,
                "n": after.n,
                "completions": leg.completions,
                "seconds": leg.seconds,
                "checkpoint": str(leg.checkpoint.path),
                "harness": h.sha,
            },
            indent=2,
        )
    )


@app.command("search")
def search_cmd(
    model: ModelOpt = "tiny",
    suite: SuiteOpt = "arith",
    harness: HarnessOpt = None,
    data: DataOpt = None,
    proposer: Annotated[
        str, typer.Option(help="'mutate' (offline) or a litellm model, e.g. openai/gpt-4o-mini")
    ] = "mutate",
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL for the proposer")] = None,
    candidates: Annotated[int, typer.Option("-k", "--candidates", min=1, max=64, help="candidates to propose")] = 8,
    prompt_only: Annotated[bool, typer.Option("--prompt-only", help="only the instruction may change")] = False,
    seed: SeedOpt = 0,
    device: DeviceOpt = "auto",
) -> None:
    """Run one harness leg with the policy frozen and print the leaderboard (★ = Pareto front of score vs tokens).

    Example: `whale search --model tiny --suite arith --proposer mutate -k 8`
    """
    setup_offline_env()
    from rich.table import Table

    from whale_core.archive import Archive
    from whale_core.search import SearchConfig, run_harness_leg

    s = _suite(suite, data, seed)
    h = _harness(harness, s)
    cfg = SearchConfig(proposer=proposer, api_base=api_base, candidates=candidates)
    policy = _policy(model, device)
    out_dir = _run_dir("search")
    archive = Archive()
    run = archive.create_run(name=out_dir.name, mode="search", config={"search": cfg.model_dump(), "suite": suite})
    con = _console()
    with con.status("harness leg…") as status:
        res = run_harness_leg(
            policy=policy,
            incumbent=h,
            suite=s,
            cfg=cfg,
            archive=archive,
            run_id=run.id,
            leg_id=None,
            iteration=0,
            seed=seed,
            traces_dir=out_dir / "traces",
            restrict_to=frozenset({"instruction"}) if prompt_only else None,
            progress=lambda msg: status.update(msg),
        )
    archive.update_run(run.id, status="finished")
    table = Table(title=f"harness leaderboard ({suite}, val, policy {policy.policy_id[:10]})")
    for col in ("", "harness", "sha", "status", "score", "n", "prompt tok/problem"):
        table.add_column(col)
    for row in res.leaderboard():
        table.add_row(
            "★" if row["pareto"] else "",
            str(row["name"]),
            str(row["sha"])[:10],
            row["status"],
            f"{row['score']:.3f}",
            str(row["n"]),
            f"{row['tokens'] or 0:.1f}",
        )
    con.print(table)
    rejected = [c for c in res.candidates if c.status == "rejected"]
    for c in rejected:
        con.print(f"[dim]rejected: {c.reason}[/]")
    con.print(f"{'[bold green]accepted' if res.accepted else '[bold yellow]kept the incumbent'}[/]: {res.reason}")
    if res.accepted:
        (out_dir / "winner.yaml").write_text(res.incumbent_out.text)
        con.print(f"winner: {out_dir / 'winner.yaml'}\n{res.incumbent_in.diff(res.incumbent_out)}")
    con.print(f"{res.completions} completions; archive run {run.id}")


def _print_summary(summary: dict[str, Any]) -> None:
    from whale_core.env import whale_home

    con = _console()
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


ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (see `whale config`)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override, e.g. --set weights.steps=200 (repeatable)")]


@app.command("run")
def run_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    mode: Annotated[
        str | None, typer.Option(help="whale-adaptive | whale-fixed | weights-only | harness-only | prompt-weights")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="run id (default: generated)")] = None,
) -> None:
    """Run WHALE end to end: alternate harness search and GRPO under one rollout budget, evaluate on test, report.

    With no arguments this is the embedded default: the built-in tiny model, the `arith` suite, the offline `mutate`
    proposer, an ephemeral Prefect server, SQLite archive and MLflow under $WHALE_HOME. Everything is resumable
    (`whale resume RUN`). Example: `whale run --set iterations=6 --set search.proposer=openai/gpt-4o-mini`
    """
    setup_offline_env()
    _start_prefect_server()  # first: it boots while the config, the flows and the preload are imported
    from whale_core.config import load_config

    overrides = list(set_ or []) + ([f"mode={mode}"] if mode else [])
    cfg = load_config(config, overrides)
    _check_model(cfg)
    from flows.whale_run import start_run

    _console().print(
        f"[bold]whale run[/] mode={cfg.mode} model={cfg.model.name} suite={cfg.suite.name} "
        f"proposer={cfg.search.proposer} iterations={cfg.iterations} budget={cfg.budget.total}"
    )
    _print_summary(start_run(cfg, run_id))


@app.command("resume")
def resume_cmd(run: Annotated[str, typer.Argument(help="run id (see `whale runs`)")]) -> None:
    """Continue a stopped or crashed run: completed tasks come back Cached; MLflow runs are re-attached."""
    setup_offline_env()
    _start_prefect_server()
    from flows.whale_run import resume_run

    _print_summary(resume_run(run))


@app.command("rerun")
def rerun_cmd(
    run: Annotated[str, typer.Argument(help="run id")],
    iteration: Annotated[int, typer.Option("--iteration", "-i", help="iteration whose leg to recompute")],
) -> None:
    """Recompute one iteration's leg (e.g. after a failure or a fix) and whatever depends on it; nothing else."""
    setup_offline_env()
    _start_prefect_server()
    from flows.whale_run import rerun_iteration

    _print_summary(rerun_iteration(run, iteration))


@app.command("runs")
def runs_cmd() -> None:
    """List the runs in the archive."""
    setup_offline_env()
    from rich.table import Table

    from whale_core.archive import Archive

    table = Table("run", "mode", "status", "created")
    for r in Archive().runs():
        table.add_row(r.id, r.mode, r.status, r.created.strftime("%Y-%m-%d %H:%M"))
    _console().print(table)


@app.command("deploy")
def deploy_cmd(
    cron: Annotated[str, typer.Option(help="cron schedule, e.g. '0 3 * * *' (nightly at 03:00)")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "whale-nightly",
) -> None:
    """Serve `whale_run` as a Prefect deployment on a cron schedule (long-running; needs a Prefect server:
    `infra/local_servers.sh` or PREFECT_API_URL). Each scheduled run gets a fresh run id."""
    setup_offline_env()
    from whale_core.config import load_config

    load_config(config, set_ or [])  # validate now, not at 03:00
    from flows.scheduled import scheduled_run

    _console().print(f"serving deployment '{name}' with cron '{cron}' (Ctrl-C stops)")
    params = {"config_path": str(config.resolve()) if config else None, "overrides": list(set_ or [])}
    scheduled_run.serve(name=name, cron=cron, parameters=params)


@app.command("ui")
def ui_cmd(
    port: Annotated[int, typer.Option(min=1, max=65535, help="MLflow UI port on 127.0.0.1")] = 5000,
) -> None:
    """Start the MLflow UI on 127.0.0.1 over the embedded store (and print how to reach the Prefect UI)."""
    import os
    import subprocess

    home = setup_offline_env()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home / 'mlflow.db'}"
    con = _console()
    con.print(f"MLflow UI: http://127.0.0.1:{port} (store {uri})")
    con.print(f"Prefect UI: `PREFECT_HOME={home / 'prefect'} prefect server start` → http://127.0.0.1:4200")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    subprocess.run(
        [
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            uri,
            "--artifacts-destination",
            str(home / "mlartifacts"),
        ],
        env=env,
        check=False,
    )


@app.command("config")
def config_cmd(
    config: Annotated[Path | None, typer.Option(help="YAML config to validate and print in full")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override, e.g. weights.steps=200")] = None,
) -> None:
    """Print the full configuration (defaults filled in) — copy it to a file, edit, pass it with `--config`."""
    from whale_core.config import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(config, set_ or [])))


@app.command("compare")
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
) -> None:
    """Run every mode x seed under the same budget and write a comparison report (bar chart, training curves with
    leg switches, budget per leg, phase sweep, robustness matrix) under $WHALE_HOME/compare/ID, also in MLflow.

    A failed run is reported, not fatal; re-running with the same `--id` resumes (finished runs are reused).
    Example: `whale compare --modes all --seeds 3 --sweep-phase 1,2,4,8 --id cmp1`
    """
    import shlex
    import sys

    setup_offline_env()
    from pydantic import ValidationError

    from whale_core.compare import CompareSpec, parse_ints, parse_modes
    from whale_core.config import load_config

    cfg = load_config(config, list(set_ or []))
    _check_model(cfg)
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
        _fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    cid = compare_id or _new_compare_id()
    command = shlex.join(["whale", *sys.argv[1:]]) if sys.argv[1:2] == ["compare"] else ""
    if command and "--id" not in sys.argv:
        command += f" --id {cid}"
    _start_prefect_server()
    from flows.compare import start_compare

    con = _console()
    con.print(
        f"[bold]whale compare[/] {cid}: modes={','.join(spec.modes)} seeds={spec.seeds} "
        f"sweep={spec.sweep_phase or '-'} budget={cfg.budget.total} model={cfg.model.name}"
    )
    t0 = time.perf_counter()
    request = {"config": config.read_text() if config else None, "set": sorted(set_ or [])}
    summary = start_compare(cfg, spec, cid, command=command, request=request)
    from rich.table import Table

    from whale_core.compare import RunOutcome, aggregate

    outcomes = [RunOutcome(**o) for o in summary["outcomes"]]
    table = Table("variant", "seeds ok", "failed", "test (mean ± sd)")
    for s in aggregate(outcomes):
        table.add_row(s.label, str(s.n), str(s.failed), f"{s.mean:.4f} ± {s.sd:.4f}" if s.n else "—")
    con.print(table)
    for o in outcomes:
        if not o.ok:
            con.print(f"[yellow]failed[/] {o.run_id}: {o.error}")
    if summary.get("matrix_error"):
        con.print(f"[yellow]robustness matrix failed:[/] {summary['matrix_error']}")
    con.print(f"report: {summary['report']} ({time.perf_counter() - t0:.0f}s)")


def main() -> None:
    """Console-script entry point (SIGTERM and exit handling: `whale_core.process`)."""
    from whale_core.process import run_cli

    run_cli(app)


if __name__ == "__main__":
    main()
