"""``grpo-update``: one weights leg (GRPO + LoRA) against the frozen incumbent harness.

``population``: the mitigation's extra harnesses (``weights.population``), chosen by the flow from the archive.

The leg's ``out_dir`` is fixed by (run, iteration, generation), so a retry of this task — or a resumed run after a
crash — finds the TRL checkpoints the interrupted attempt saved and continues from the last one, not from step 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import suite_of
from whale_core.records.refs import HarnessRef, PolicyRef, checkpoint_from_dir


@dataclass(frozen=True)
class WeightsOutcome:
    policy: PolicyRef
    checkpoint: dict[str, Any]
    completions: int
    seconds: float
    resumed_from_step: int | None
    steps: list[dict[str, Any]] = field(default_factory=list)


@task(
    name="grpo-update",
    cache_key_fn=content_cache_key("out_dir"),
    persist_result=True,
    retries=1,
    retry_delay_seconds=5,
)
def grpo_update(
    policy: PolicyRef,
    base: PolicyRef,
    harness: HarnessRef,
    suite: dict[str, Any],
    weights: dict[str, Any],
    seed: int,
    iteration: int,
    generation: int,
    max_completions: int | None,
    out_dir: str,
    population: list[HarnessRef] | None = None,
) -> WeightsOutcome:
    from whale_core.legs.weights_leg import WeightsConfig, train_weights_leg

    cfg = WeightsConfig.model_validate({**weights, "seed": seed + 1000 * iteration})
    parent = None if policy.is_base else checkpoint_from_dir(policy.adapter or policy.model)
    trainable = base.load(trainable=True)
    leg = train_weights_leg(
        trainable,
        harness.load(),
        suite_of(suite),
        cfg,
        out_dir=Path(out_dir),
        max_completions=max_completions,
        parent_checkpoint=parent,
        population=[m.load() for m in population or []],
        callbacks=fault.trainer_callbacks(),
    )
    fault.point("grpo-update")
    return WeightsOutcome(
        policy=PolicyRef.of_checkpoint(base, leg.checkpoint),
        checkpoint=dataclasses.asdict(leg.checkpoint),
        completions=leg.completions,
        seconds=leg.seconds,
        resumed_from_step=leg.resumed_from_step,
        steps=[dataclasses.asdict(s) for s in leg.steps],
    )
