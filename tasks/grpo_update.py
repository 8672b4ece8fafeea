"""``grpo-update``: one weights leg (GRPO + LoRA) against the frozen incumbent harness
(`whale_core.ascent.local.train_job`).

``weights`` carries the leg's own GRPO seed (the engine derives it); ``population``: the mitigation's extra harnesses
(``weights.population``), chosen by the engine from the archive. The leg's ``out_dir`` (relative to the home) is
fixed by (run, iteration, generation), so a retry of this task — or a resumed run after a crash — finds the TRL
checkpoints the interrupted attempt saved and continues from the last one, not from step 0. It is part of the cache
key: a run's trained checkpoint lies in its own directory (two runs of one config each train their own; a moved home
still hits the cache).
"""

from __future__ import annotations

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import suite_of
from whale_core.ascent.calls import TrainJob
from whale_core.legs.weights_config import WeightsConfig
from whale_core.legs.weights_leg import WeightsOutcome
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites import SuiteConfig


@task(
    name="grpo-update",
    cache_key_fn=content_cache_key(),
    persist_result=True,
    retries=1,
    retry_delay_seconds=5,
)
def grpo_update(
    policy: PolicyRef,
    base: PolicyRef,
    harness: HarnessRef,
    suite: SuiteConfig,
    weights: WeightsConfig,
    generation: int,
    max_completions: int,
    out_dir: str,
    population: list[HarnessRef] | None = None,
) -> WeightsOutcome:
    """One GRPO update; ``generation`` is part of the cache key (and of ``out_dir``): a rerun's generation trains
    again."""
    from whale_core.ascent.local import train_job

    job = TrainJob(base, policy, harness, weights, max_completions, out_dir, generation, tuple(population or ()))
    out = train_job(job, suite_of(suite), callbacks=fault.trainer_callbacks())
    fault.point("grpo-update")
    return out
