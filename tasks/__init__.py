"""WHALE's Prefect tasks: thin wrappers that parse small records, call `whale_core`, and return small records.

Every task has a content-addressed cache key (`tasks.cache`) and persists its result, so a resumed run gets
completed work back as ``Cached``; the proposer call retries with backoff; a retried GRPO update resumes from its
last TRL checkpoint.
"""

from tasks.grpo_update import WeightsOutcome, grpo_update
from tasks.plateau_check import plateau_check
from tasks.propose_harness import ProposalRecord, propose_harness
from tasks.rollout import EvalResult, rollout_task
from tasks.score_harness import score_harness

__all__ = [
    "EvalResult",
    "ProposalRecord",
    "WeightsOutcome",
    "grpo_update",
    "plateau_check",
    "propose_harness",
    "rollout_task",
    "score_harness",
]
