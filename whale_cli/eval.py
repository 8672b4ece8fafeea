"""``whale eval``: score a (model, harness) pair on a suite split and write per-example traces (no orchestration)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from whale_cli.common import (
    AdapterFlag,
    BatchSizeFlag,
    ConfigOpt,
    DataFlag,
    DeviceFlag,
    HarnessFlag,
    ModelFlag,
    SeedFlag,
    SetOpt,
    SuiteFlag,
    console,
    fail,
    line,
    load_harness,
    load_policy_with_status,
    load_suite_from,
    progress_rollout,
    resolve_config,
    run_dir,
    styled,
)
from whale_core.env import setup_offline_env


def eval_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    model: ModelFlag = None,
    suite: SuiteFlag = None,
    harness: HarnessFlag = None,
    data: DataFlag = None,
    split: Annotated[str, typer.Option(help="val | test | train")] = "val",
    n: Annotated[int | None, typer.Option("-n", min=1, help="evaluate the first N problems of the split")] = None,
    adapter: AdapterFlag = None,
    batch_size: BatchSizeFlag = None,
    out: Annotated[Path | None, typer.Option(help="traces JSONL path (default under $WHALE_HOME/runs/)")] = None,
    seed: SeedFlag = None,
    device: DeviceFlag = None,
) -> None:
    """Score a (model, harness) pair on a suite split; print the score and write per-example traces (JSONL).

    The suite's problems follow `--seed` unless `suite.seed` is set.
    Example: `whale eval --model tiny --suite arith --harness my.yaml -n 500`
    """
    setup_offline_env()
    if split not in ("train", "val", "test"):
        fail(f"--split must be one of train, val, test (got {split!r})")
    from whale_core.config import Follows

    cfg = resolve_config(
        config,
        set_,
        defaults={"suite.seed": Follows("seed")},
        model=model,
        suite=suite,
        harness=harness,
        data=data,
        adapter=adapter,
        batch_size=batch_size,
        seed=seed,
        device=device,
    )
    s = load_suite_from(cfg.suite)
    h = load_harness(cfg.harness, s)
    problems = list(s.problems(split))[:n]
    policy = load_policy_with_status(cfg.model.name, cfg.model.device, cfg.model.adapter)
    result = progress_rollout(policy, h, s, problems, batch_size=cfg.rollout.batch_size, seed=cfg.seed, split=split)
    path = out or run_dir("eval") / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write_jsonl(path)
    con = console()
    con.print(line("harness ", styled(h.name, "bold"), f" ({h.sha[:12]}) on {cfg.suite.name}/{split}: n={result.n}"))
    con.print(line(
        styled(f"score {result.score:.4f}", "bold green"),
        f"  ({result.completions} completions, {result.prompt_tokens / max(result.n, 1):.1f} prompt tokens/problem, "
        f"{result.seconds:.1f}s)",
    ))  # fmt: skip
    con.print(f"traces: {path}")
