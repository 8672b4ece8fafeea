"""What an LLM proposer spends, and the budget that stops it (``search.proposer_budget``).

Every request's usage is a dict of counters (`USAGE_KEYS`): prompt and completion tokens, litellm's cost in USD
(0 for local and unknown models), seconds waited, and the request counts that say how the proposer fared —
``requests``, ``retries`` (an error fed back), ``truncated`` (a reply cut at ``max_tokens``), ``repaired``
(near-JSON repaired), ``fallbacks`` (an output mode the provider refused). Usage is attached to the proposals (each
proposal carries the requests made for it, so summing over a leg's proposals gives the leg's totals); the harness
leg logs the totals as the leg's ``proposer_*`` metrics (archive, MLflow, report).

The budget is per run: ``tokens`` (prompt + completion) and/or ``usd``. `Spend` starts from what the run's earlier
legs spent (`ProposalContext.proposer_spent`, read back from the archive, so a resumed run keeps counting) and is
checked before every request; once spent, the proposer makes no more requests — a leg that could not make one
raises `ProposerBudgetSpent`, which the leg records as its decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from whale_core.proposers.base import ProposerUnavailable

__all__ = ["USAGE_KEYS", "ProposerBudgetSpent", "Spend", "add_usage", "usage_line"]

USAGE_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_s",
    "requests",
    "retries",
    "truncated",
    "repaired",
    "fallbacks",
)


class ProposerBudgetSpent(ProposerUnavailable):
    """The run's proposer budget (``search.proposer_budget``) was spent before this leg could make a request."""


def add_usage(total: dict[str, float], usage: dict[str, float]) -> dict[str, float]:
    """``total`` plus ``usage``, key by key (a new dict)."""
    out = dict(total)
    for key, value in usage.items():
        out[key] = out.get(key, 0.0) + float(value)
    return out


def usage_line(usage: dict[str, float]) -> str:
    """One line for the console and the report: requests (with retries, cut-offs, repairs, fallbacks), tokens,
    cost and seconds waited."""
    notes = [
        f"{int(usage[key])} {label}"
        for key, label in (("retries", "fed back"), ("truncated", "cut off"), ("repaired", "repaired"),
                           ("fallbacks", "output-mode fallbacks"))
        if usage.get(key)
    ]  # fmt: skip
    return (
        f"{int(usage.get('requests', 0))} requests{' (' + ', '.join(notes) + ')' if notes else ''}, "
        f"{int(usage.get('prompt_tokens', 0)):,} prompt + {int(usage.get('completion_tokens', 0)):,} completion "
        f"tokens, ${usage.get('cost_usd', 0.0):.4f}, {usage.get('latency_s', 0.0):.0f} s waiting"
    )


@dataclass
class Spend:
    """A leg's running spend against the run's budget: ``before`` is what earlier legs spent (tokens, cost)."""

    tokens: int | None = None
    usd: float | None = None
    before: dict[str, float] = field(default_factory=dict)
    leg: dict[str, float] = field(default_factory=dict)

    def add(self, usage: dict[str, float]) -> None:
        self.leg = add_usage(self.leg, usage)

    def _total(self, key: str) -> float:
        return self.before.get(key, 0.0) + self.leg.get(key, 0.0)

    @property
    def tokens_spent(self) -> int:
        return int(self._total("prompt_tokens") + self._total("completion_tokens"))

    @property
    def usd_spent(self) -> float:
        return self._total("cost_usd")

    def exhausted(self) -> str | None:
        """Why no further request may be made (None while the budget lasts)."""
        if self.tokens is not None and self.tokens_spent >= self.tokens:
            return (
                f"proposer budget spent: {self.tokens_spent:,} of {self.tokens:,} tokens "
                "(search.proposer_budget.tokens); no more proposer requests in this run"
            )
        if self.usd is not None and self.usd_spent >= self.usd:
            return (
                f"proposer budget spent: ${self.usd_spent:.4f} of ${self.usd:.4f} "
                "(search.proposer_budget.usd); no more proposer requests in this run"
            )
        return None
