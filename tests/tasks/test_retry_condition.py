"""The ``propose-harness`` task's retry condition: a dead proposer is retried (Prefect's retries), a spent proposer
budget or a request the provider refused is not — it would fail the same way again."""

from __future__ import annotations

from prefect.states import Failed

from tasks.propose_harness import propose_harness, worth_retrying
from whale_core.proposers import ProposerUnavailable
from whale_core.proposers.replies import ProviderRefused
from whale_core.proposers.spend import ProposerBudgetSpent


def test_only_a_proposer_that_may_come_back_is_retried() -> None:
    assert propose_harness.retry_condition_fn is worth_retrying and propose_harness.retries == 2
    assert worth_retrying(None, None, Failed(data=ProposerUnavailable("connection refused")))
    assert worth_retrying(None, None, Failed(data=RuntimeError("anything else")))
    assert not worth_retrying(None, None, Failed(data=ProposerBudgetSpent("proposer budget spent: 10 of 10 tokens")))
    assert not worth_retrying(None, None, Failed(data=ProviderRefused("response_format not supported")))
