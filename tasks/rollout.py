"""``rollout``: evaluate a (policy, harness) pair on the first ``n`` problems of a split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from tasks.runtime import problems_of, suite_of
from whale_core.records.refs import HarnessRef, PolicyRef, load_cached


@dataclass(frozen=True)
class EvalResult:
    score: float
    n: int
    completions: int
    prompt_tokens: int
    completion_tokens: int
    traces_path: str
    seconds: float


@task(name="rollout", cache_key_fn=content_cache_key("batch_size", "traces_dir"), persist_result=True, retries=1)
def rollout_task(
    policy: PolicyRef,
    harness: HarnessRef,
    suite: dict[str, Any],
    split: str,
    n: int,
    seed: int,
    batch_size: int,
    traces_dir: str,
) -> EvalResult:
    from whale_core.rollout import rollout

    s = suite_of(suite)
    problems = problems_of(s, split, n, seed)
    result = rollout(load_cached(policy), harness.load(), s, problems, batch_size=batch_size, seed=seed, split=split)
    path = Path(traces_dir) / f"{split}-{harness.sha[:12]}-{policy.checkpoint_id[:16]}-n{len(problems)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write_jsonl(path)
    fault.point("rollout-test" if split == "test" else "rollout")
    return EvalResult(
        score=result.score,
        n=result.n,
        completions=result.completions,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        traces_path=str(path),
        seconds=result.seconds,
    )
