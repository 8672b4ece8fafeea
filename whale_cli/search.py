"""``whale search``: one harness leg with the policy frozen, through the engine in this process (no orchestration),
printed as a leaderboard."""

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
    leg_engine,
    line,
    refuse_adapter,
    resolve_config,
    styled,
)
from whale_core.env import setup_offline_env


def search_defaults() -> dict[str, object]:
    """`whale search`'s own defaults (below a config file and ``--set``): the suite's problems follow ``--seed``, and
    the offline `mutate` proposer searches the structural space (benchmarks/harness_gap.py uses the same)."""
    from whale_core.config import Follows

    return {"suite.seed": Follows("seed"), "search.mutate_space": "structural"}


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
    the leg (proposer, candidates, rounds, ...). The offline `mutate` proposer searches the structural space here
    (search.mutate_space=structural: framing, stops, which number the parse takes, an answer prefix, demos — the
    format fixes a new task needs); `whale run` keeps `classic` unless told (docs/real-model.md has both measured).
    Examples: `whale search --model smollm2-135m --suite jsonl --data problems.jsonl` (a new task);
    `whale search --model tiny --suite arith --set search.mutate_space=classic -k 8` (the tiny model's headroom is
    the answer encoding: the classic space gives it all 8 candidates and finds it in 3 seeds of 3, structural in 1)
    """
    setup_offline_env()
    from rich.table import Table

    from whale_cli.progress import leg_console

    whale = resolve_config(
        config,
        set_,
        defaults=search_defaults(),
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
    whale = whale.model_copy(update={"mode": "prompt-weights" if prompt_only else "harness-only"})
    engine = leg_engine(whale, "search", {"search": whale.search.model_dump(), "suite": whale.suite.name})
    out_dir, base, con = engine.run_dir, engine.base, console()
    with leg_console(con):
        result = engine.one_leg("harness", measure=False)
    engine.rec.run_status("finished")
    res = result.harness_legs[-1]
    proposer = whale.search.proposer
    if proposer == "mutate":
        proposer += f", {whale.search.mutate_space} space"
    title = f"harness leaderboard ({whale.suite.name}, val, policy {base.checkpoint_id[:10]}, proposer {proposer})"
    table = Table(title=title)
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
        con.print(f"rejected: {c.reason}", style="dim", markup=False, highlight=False)
    verdict = styled("accepted", "bold green") if res.accepted else styled("kept the incumbent", "bold yellow")
    con.print(line(verdict, f": {res.reason}"))
    if res.accepted:
        (out_dir / "winner.yaml").write_text(res.incumbent_out.text)
        con.print(f"winner: {out_dir / 'winner.yaml'}", markup=False, highlight=False)
        con.print(res.incumbent_in.diff(res.incumbent_out), markup=False, highlight=False)
    con.print(f"{res.completions} completions; archive run {out_dir.name}", markup=False, highlight=False)
