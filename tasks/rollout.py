"""``rollout``: evaluate a (policy, harness) pair on the first ``n`` problems of a split
(`whale_core.ascent.local.evaluate_pair`)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import suite_of
from whale_core.ascent.calls import Evaluation, Split
from whale_core.records.refs import HarnessRef, PolicyRef, load_cached
from whale_core.suites import SuiteConfig


@task(name="rollout", cache_key_fn=content_cache_key("batch_size", "traces_dir"), persist_result=True, retries=1)
def rollout_task(
    policy: PolicyRef,
    harness: HarnessRef,
    suite: SuiteConfig,
    split: Split,
    n: int,
    seed: int,
    batch_size: int,
    traces_dir: str,
) -> Evaluation:
    from whale_core.ascent.local import evaluate_pair

    out = evaluate_pair(
        load_cached(policy), harness, suite_of(suite), split, n, seed=seed, batch_size=batch_size,
        traces_dir=Path(traces_dir),
    )  # fmt: skip
    fault.point("rollout-test" if split == "test" else "rollout")
    return out
