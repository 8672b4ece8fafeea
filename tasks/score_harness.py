"""``score-harness``: one candidate's per-problem scores on a slice of the leg's validation ordering."""

from __future__ import annotations

from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import problems_of, suite_of
from whale_core.legs.scoring import ScoreBlock, score_block
from whale_core.records.refs import HarnessRef, PolicyRef, load_cached


@task(name="score-harness", cache_key_fn=content_cache_key("batch_size"), persist_result=True, retries=1)
def score_harness(
    policy: PolicyRef, harness: HarnessRef, suite: dict[str, Any], start: int, end: int, seed: int, batch_size: int
) -> ScoreBlock:
    s = suite_of(suite)
    problems = problems_of(s, "val", end, seed)[start:end]
    block = score_block(load_cached(policy), harness.load(), s, problems, batch_size=batch_size, seed=seed)
    fault.point("score-harness")
    return block
