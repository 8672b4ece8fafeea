"""Harness proposers: the archive and traces of the harness search in, K candidate harness texts out.

- `base`: the records (`ArchiveEntry`, `FailingTrace`, `ProposalContext`, `Proposal`), the `Proposer` protocol,
  `ProposerUnavailable`, the validity gate `check_candidate` and the `FORMAT_REFERENCE` shown to LLM proposers.
- `mutate`: `MutateProposer`, offline seeded generic edits.
- `llm`: `LLMProposer`, any chat model through litellm (imported lazily).
- `context`: the LLM prompt built from a context within a token budget (and a compact one for small models).
- `served`: `ServedProposer`, a local chat model served by WHALE itself (`serve`: its server's start and stop).
"""

from __future__ import annotations

from whale_core.proposers.base import (
    FORMAT_REFERENCE,
    ArchiveEntry,
    FailingTrace,
    Proposal,
    ProposalContext,
    Proposer,
    ProposerUnavailable,
    changed_fields,
    check_candidate,
)
from whale_core.proposers.llm import LLMProposer
from whale_core.proposers.mutate import MutateProposer

__all__ = [
    "FORMAT_REFERENCE",
    "ArchiveEntry",
    "FailingTrace",
    "LLMProposer",
    "MutateProposer",
    "Proposal",
    "ProposalContext",
    "Proposer",
    "ProposerUnavailable",
    "changed_fields",
    "check_candidate",
]
