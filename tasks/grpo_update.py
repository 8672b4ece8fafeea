"""``grpo-update``: one weights leg (GRPO + LoRA) against the frozen incumbent harness.

``population``: the mitigation's extra harnesses (``weights.population``), chosen by the flow from the archive.

The leg's ``out_dir`` is fixed by (run, iteration, generation), so a retry of this task — or a resumed run after a
crash — finds the TRL checkpoints the interrupted attempt saved and continues from the last one, not from step 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import suite_of
from whale_core.legs.weights_leg import WeightsOutcome
from whale_core.records.refs import HarnessRef, PolicyRef


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
    """`whale_core.legs.weights_leg.train_pair` with the iteration's GRPO seed (`whale_core.seeds.weights_leg_seed`);
    ``generation`` is part of the cache key (and of ``out_dir``): a rerun's generation trains again."""
    from whale_core.legs.weights_leg import WeightsConfig, train_pair
    from whale_core.seeds import weights_leg_seed

    cfg = WeightsConfig.model_validate({**weights, "seed": weights_leg_seed(seed, iteration)})
    out = train_pair(
        base,
        policy,
        harness,
        suite_of(suite),
        cfg,
        out_dir=Path(out_dir),
        max_completions=max_completions,
        population=population or [],
        callbacks=fault.trainer_callbacks(),
    )
    fault.point("grpo-update")
    return out
