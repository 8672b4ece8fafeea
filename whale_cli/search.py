"""``whale search``: one harness leg with the policy frozen, printed as a leaderboard (no orchestration)."""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import (
    DataOpt,
    DeviceOpt,
    HarnessOpt,
    ModelOpt,
    SeedOpt,
    SuiteOpt,
    console,
    load_harness,
    load_policy_with_status,
    load_suite,
    run_dir,
)
from whale_core.env import setup_offline_env


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

    from whale_core.legs.harness_leg import HarnessLeg, HarnessLegOptions, SearchConfig
    from whale_core.records.archive import Archive
    from whale_core.records.recorder import Recorder

    s = load_suite(suite, data, seed)
    h = load_harness(harness, s)
    cfg = SearchConfig(proposer=proposer, api_base=api_base, candidates=candidates)
    policy = load_policy_with_status(model, device)
    out_dir = run_dir("search")
    archive = Archive()
    run = archive.create_run(name=out_dir.name, mode="search", config={"search": cfg.model_dump(), "suite": suite})
    con = console()
    with con.status("harness leg…") as status:
        restrict = frozenset({"instruction"}) if prompt_only else None
        options = HarnessLegOptions(cfg, seed, out_dir / "traces", restrict_to=restrict)
        leg = HarnessLeg(
            options, s, Recorder(archive, run_id=run.id), policy=policy, progress=lambda msg: status.update(msg)
        )
        res = leg.search(run_id=run.id, iteration=0, incumbent=h, policy_id=str(policy.policy_id))
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
