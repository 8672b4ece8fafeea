"""``whale train``: one weights leg (GRPO + LoRA on prompts the harness renders), val score before and after."""

from __future__ import annotations

import json

from whale_cli.common import (
    ConfigOpt,
    DataFlag,
    DeviceFlag,
    HarnessFlag,
    ModelFlag,
    SeedFlag,
    SetOpt,
    StepsFlag,
    SuiteFlag,
    ValProblemsFlag,
    console,
    load_harness,
    load_policy_with_status,
    load_suite_from,
    progress_rollout,
    refuse_adapter,
    resolve_config,
    run_dir,
)
from whale_core.env import setup_offline_env

TRAIN_VAL_PROBLEMS = 500  # `whale train`'s own default for rollout.val_problems (a run's is 200)


def train_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    model: ModelFlag = None,
    suite: SuiteFlag = None,
    harness: HarnessFlag = None,
    data: DataFlag = None,
    steps: StepsFlag = None,
    val_problems: ValProblemsFlag = None,
    seed: SeedFlag = None,
    device: DeviceFlag = None,
) -> None:
    """Run one weights leg (GRPO on prompts the harness renders) and report the val score before and after.

    The `weights:` section sets GRPO; `-n` (rollout.val_problems) defaults to 500 here; the suite's problems follow
    `--seed` unless `suite.seed` is set.
    Example: `whale train --model tiny --suite arith --harness reversed.yaml --steps 300`
    """
    setup_offline_env()
    from whale_core.config import Follows
    from whale_core.legs.weights_leg import train_weights_leg

    cfg = resolve_config(
        config,
        set_,
        defaults={"rollout.val_problems": TRAIN_VAL_PROBLEMS, "suite.seed": Follows("seed")},
        model=model,
        suite=suite,
        harness=harness,
        data=data,
        steps=steps,
        val_problems=val_problems,
        seed=seed,
        device=device,
    )
    refuse_adapter(cfg, "whale train")
    s = load_suite_from(cfg.suite)
    h = load_harness(cfg.harness, s)
    problems = list(s.problems("val"))[: cfg.rollout.val_problems]
    policy = load_policy_with_status(cfg.model.name, cfg.model.device)
    before = progress_rollout(policy, h, s, problems, batch_size=cfg.rollout.batch_size, seed=cfg.seed, split="val")
    out_dir = run_dir("train")
    con = console()
    con.print(f"before: val score {before.score:.4f} (n={before.n}); training {cfg.weights.steps} steps → {out_dir}")
    with con.status("GRPO…"):
        leg = train_weights_leg(policy, h, s, cfg.weights.model_copy(update={"seed": cfg.seed}), out_dir=out_dir)
    from whale_core.models.policy import load_policy

    trained = (
        load_policy(cfg.model.name, adapter=str(leg.checkpoint.path), device=cfg.model.device)
        if leg.checkpoint.is_lora
        else load_policy(str(leg.checkpoint.path), device=cfg.model.device)
    )
    after = progress_rollout(trained, h, s, problems, batch_size=cfg.rollout.batch_size, seed=cfg.seed, split="val")
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
