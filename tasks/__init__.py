"""WHALE's Prefect tasks: thin wrappers around the engine's calls (`whale_core.ascent.local`), small records in and
out. `flows.calls.PrefectCalls` makes them the engine's `whale_core.ascent.calls.Calls`.

Every task has a content-addressed cache key (`tasks.cache`) and persists its result, so a resumed run gets
completed work back as ``Cached``; the proposer call retries with backoff; a retried GRPO update resumes from its
last TRL checkpoint.
"""

from tasks.grpo_update import WeightsOutcome, grpo_update
from tasks.plateau_check import plateau_check
from tasks.propose_harness import propose_harness
from tasks.rollout import rollout_task
from tasks.score_harness import score_harness

__all__ = [
    "WeightsOutcome",
    "grpo_update",
    "plateau_check",
    "propose_harness",
    "rollout_task",
    "score_harness",
]
