"""``whale train``: one weights leg (GRPO + LoRA on prompts the harness renders) through the engine in this process,
with the val score before and after."""

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
    leg_engine,
    line,
    refuse_adapter,
    resolve_config,
    styled,
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
    `--seed` unless `suite.seed` is set. The leg's budget is what its steps take (`budget.total` does not cut it).
    Example: `whale train --model tiny --suite arith --harness reversed.yaml --steps 300`
    """
    setup_offline_env()
    from whale_cli.progress import leg_console
    from whale_core.config import Follows
    from whale_core.legs.costs import leg_costs

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
    cfg = cfg.model_copy(
        update={"mode": "weights-only", "budget": cfg.budget.model_copy(update={"total": leg_costs(cfg)[0]})}
    )
    engine = leg_engine(cfg, "train", {"weights": cfg.weights.model_dump(mode="json"), "suite": cfg.suite.name})
    out_dir, con = engine.run_dir, console()
    con.print(
        f"training {cfg.weights.steps} GRPO steps from '{cfg.model.name}' → {out_dir}; val before and after on "
        f"{cfg.rollout.val_problems} problems",
        markup=False, highlight=False,
    )  # fmt: skip
    with leg_console(con):
        result = engine.one_leg("weights")
    engine.rec.run_status("finished")
    before, after = result.initial, result.last
    ckpt = after.policy.adapter_dir or after.policy.model_dir
    n = len(after.scores)
    spent = result.budget.by_kind["weights"]
    con.print(
        line(styled(f"val score {before.metric:.4f} → {after.metric:.4f}", "bold"),
             f" ({after.metric - before.metric:+.4f}, n={n}); {spent} completions; checkpoint {ckpt}"),
        highlight=False,
    )  # fmt: skip
    (out_dir / "summary.json").write_text(
        json.dumps(
            {
                "before": before.metric,
                "after": after.metric,
                "n": n,
                "completions": spent,
                "checkpoint": ckpt,
                "harness": engine.seed_harness.sha,
            },
            indent=2,
        )
    )
