"""``score-harness``: one candidate's per-problem scores on a slice of the run's validation order
(`whale_core.ascent.local.score_jobs`)."""

from __future__ import annotations

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import suite_of
from whale_core.legs.scoring import ScoreBlock
from whale_core.records.refs import HarnessRef, PolicyRef, load_cached
from whale_core.suites import SuiteConfig


@task(name="score-harness", cache_key_fn=content_cache_key("batch_size"), persist_result=True, retries=1)
def score_harness(
    policy: PolicyRef, harness: HarnessRef, suite: SuiteConfig, start: int, end: int, seed: int, batch_size: int
) -> ScoreBlock:
    from whale_core.ascent.local import score_jobs

    [block] = score_jobs(load_cached(policy), [(harness.load(), start, end)], suite_of(suite), seed=seed,
                         batch_size=batch_size)  # fmt: skip
    fault.point("score-harness")
    return block
