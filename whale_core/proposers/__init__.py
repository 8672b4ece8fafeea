"""Harness proposers: the archive and traces of the harness search in, K candidate harness texts out.

- `base`: the records (`ArchiveEntry`, `FailingTrace`, `ProposalContext`, `Proposal`), the `Proposer` protocol,
  `ProposerUnavailable`, the validity gate `check_candidate` and the `FORMAT_REFERENCE` shown to LLM proposers.
- `mutate`: `MutateProposer`, offline seeded generic edits; `sampler`: `TPEProposer`, Optuna's TPE over a space.
- `llm`: `LLMProposer`, any chat model through litellm (imported lazily).
- `context`: the LLM prompt built from a context within a token budget (and a compact one for small models).
- `served`: `ServedProposer`, a local chat model served by WHALE itself (`serve`: its server's start and stop;
  `local_server`: the server, with `grammar` enforcing a reply's JSON schema).
- `components`, `edits`, `replies`, `spend`: an LLM proposer's one-component edits (schemas, merge, selector), the
  request loop (output modes, errors fed back once, cut-off replies refused), the lenient reading of JSON replies,
  and the proposer's spend and budget.
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
