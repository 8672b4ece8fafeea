"""``whale search``: one harness leg with the policy frozen, printed as a leaderboard (no orchestration)."""

from __future__ import annotations

from typing import Annotated

import typer

from whale_cli.common import (
    ApiBaseFlag,
    CandidatesFlag,
    ConfigOpt,
    DataFlag,
    DeviceFlag,
    HarnessFlag,
    ModelFlag,
    ProposerFlag,
    SeedFlag,
    SetOpt,
    SuiteFlag,
    console,
    load_harness,
    load_policy_with_status,
    load_suite_from,
    refuse_adapter,
    resolve_config,
    run_dir,
)
from whale_core.env import setup_offline_env


def search_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    model: ModelFlag = None,
    suite: SuiteFlag = None,
    harness: HarnessFlag = None,
    data: DataFlag = None,
    proposer: ProposerFlag = None,
    api_base: ApiBaseFlag = None,
    candidates: CandidatesFlag = None,
    prompt_only: Annotated[bool, typer.Option("--prompt-only", help="only the instruction may change")] = False,
    seed: SeedFlag = None,
    device: DeviceFlag = None,
) -> None:
    """Run one harness leg with the policy frozen and print the leaderboard (★ = Pareto front of score vs tokens).

    The suite's problems follow `--seed` unless `suite.seed` is set; the `search:` section of a config file sets
    the leg (proposer, candidates, rounds, ...).
    Example: `whale search --model tiny --suite arith --proposer mutate -k 8`
    """
    setup_offline_env()
    from rich.table import Table

    from whale_core.config import Follows
    from whale_core.legs.harness_leg import HarnessLeg, HarnessLegOptions
    from whale_core.records.archive import Archive
    from whale_core.records.recorder import Recorder

    whale = resolve_config(
        config,
        set_,
        defaults={"suite.seed": Follows("seed")},
        model=model,
        suite=suite,
        harness=harness,
        data=data,
        proposer=proposer,
        api_base=api_base,
        candidates=candidates,
        seed=seed,
        device=device,
    )
    refuse_adapter(whale, "whale search")
    s = load_suite_from(whale.suite)
    h = load_harness(whale.harness, s)
    cfg = whale.search
    policy = load_policy_with_status(whale.model.name, whale.model.device)
    out_dir = run_dir("search")
    archive = Archive()
    run = archive.create_run(
        name=out_dir.name, mode="search", config={"search": cfg.model_dump(), "suite": whale.suite.name}
    )
    con = console()
    with con.status("harness leg…") as status:
        restrict = frozenset({"instruction"}) if prompt_only else None
        options = HarnessLegOptions(cfg, whale.seed, out_dir / "traces", restrict_to=restrict)
        leg = HarnessLeg(
            options, s, Recorder(archive, run_id=run.id), policy=policy, progress=lambda msg: status.update(msg)
        )
        res = leg.search(run_id=run.id, iteration=0, incumbent=h, policy_id=str(policy.policy_id))
    archive.update_run(run.id, status="finished")
    table = Table(title=f"harness leaderboard ({whale.suite.name}, val, policy {policy.policy_id[:10]})")
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
