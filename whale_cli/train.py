"""``whale train``: one weights leg (GRPO + LoRA on prompts the harness renders), val score before and after."""

from __future__ import annotations

import json
from pathlib import Path
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
    progress_rollout,
    run_dir,
)
from whale_core.env import setup_offline_env


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
    from whale_core.legs.weights_leg import train_weights_leg

    overrides = list(set_ or [])
    if steps is not None:
        overrides.append(f"weights.steps={steps}")
    cfg = load_config(config, overrides)
    s = load_suite(suite, data, seed)
    h = load_harness(harness, s)
    problems = list(s.problems("val"))[:n]
    policy = load_policy_with_status(model, device)
    before = progress_rollout(policy, h, s, problems, batch_size=cfg.rollout.batch_size, seed=seed, split="val")
    out_dir = run_dir("train")
    con = console()
    con.print(f"before: val score {before.score:.4f} (n={before.n}); training {cfg.weights.steps} steps → {out_dir}")
    with con.status("GRPO…"):
        leg = train_weights_leg(policy, h, s, cfg.weights.model_copy(update={"seed": seed}), out_dir=out_dir)
    from whale_core.models.policy import load_policy

    trained = (
        load_policy(model, adapter=str(leg.checkpoint.path), device=device)
        if leg.checkpoint.is_lora
        else load_policy(str(leg.checkpoint.path), device=device)
    )
    after = progress_rollout(trained, h, s, problems, batch_size=cfg.rollout.batch_size, seed=seed, split="val")
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
