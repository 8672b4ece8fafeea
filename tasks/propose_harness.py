"""``propose-harness``: ask the configured proposer for candidate harness texts (retried with backoff).

The task returns plain `ProposedText`s (text, status, reason, parent, usage); the harness leg validates the texts
(its one gate). A proposer that stays unavailable after Prefect's retries raises `ProposerUnavailable`; the leg
records it and keeps the incumbent. A spent proposer budget or a refused request is not retried.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from whale_core.ascent.calls import ProposedText
from whale_core.legs.harness_config import SearchConfig, make_proposer
from whale_core.proposers.base import ProposalContext
from whale_core.proposers.replies import ProviderRefused
from whale_core.proposers.spend import ProposerBudgetSpent


def worth_retrying(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: a spent proposer budget, or a request the provider refused, fails the same way
    again — no retry (the leg records it at once)."""
    return not isinstance(getattr(state, "data", None), ProposerBudgetSpent | ProviderRefused)


@task(
    name="propose-harness",
    cache_key_fn=content_cache_key(),
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_condition_fn=worth_retrying,
)
def propose_harness(context: ProposalContext, k: int, search: SearchConfig, seed: int) -> list[ProposedText]:
    from whale_core.ascent.local import propose_texts

    out = propose_texts(make_proposer(search, seed), context, k)
    fault.point("propose-harness")
    return out
