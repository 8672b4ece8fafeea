"""``propose-harness``: ask the configured proposer for candidate harness texts (retried with backoff).

The task returns plain `ProposalRecord`s (text, status, reason, usage); the flow re-validates texts into harnesses.
A proposer that stays unavailable after Prefect's retries raises `ProposerUnavailable`; the flow records it and the
leg keeps the incumbent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from whale_core.legs.harness_leg import SearchConfig, make_proposer
from whale_core.proposers.base import ProposalContext


@dataclass(frozen=True)
class ProposalRecord:
    text: str | None
    sha: str | None
    status: str
    reason: str | None
    proposer: str
    usage: dict[str, float] = field(default_factory=dict)


@task(
    name="propose-harness",
    cache_key_fn=content_cache_key(),
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 10],
)
def propose_harness(context: ProposalContext, k: int, search: dict[str, Any], seed: int) -> list[ProposalRecord]:
    proposer = make_proposer(SearchConfig.model_validate(search), seed)
    records = [
        ProposalRecord(p.text, p.sha, p.status, p.reason, p.proposer, dict(p.usage))
        for p in proposer.propose(context, k)
    ]
    fault.point("propose-harness")
    return records
