"""The ``served`` proposer: a local instruct model, served by WHALE itself, proposes harnesses through litellm.

``search.proposer=served:/path/to/hf-dir`` or ``served:NAME`` (a named, installed model). The model's server is
started on first use in the process and reused by every later leg (`whale_core.proposers.serve`); requests go
through litellm's OpenAI client exactly as for a hosted provider (`LLMProposer`), so timeouts, retries and the
reply parsing (fenced YAML blocks → `check_candidate`) are the same.

What differs from the hosted `llm` proposer, for models of ~100 M–1 B parameters on a CPU:

- **one candidate per request**, ``k`` requests per leg, each asking to change one named field of the incumbent
  (a seeded rotation, `compact_focus`) with the compact prompt (`build_compact_messages`): a small model copies the
  example it is given and does not write several documents in one reply;
- **the model's own tokenizer** counts the prompt: the chat-templated messages must fit
  ``min(context_tokens, window - max_tokens)`` where ``window`` is the model's ``max_position_embeddings``; the
  builder trims archive lines and traces to fit. A prompt whose fixed part alone leaves less than ``max_tokens``
  asks for fewer new tokens; one that leaves less than `MIN_REPLY_TOKENS` is never sent (`ProposerUnavailable`
  naming the sizes: it would fail the same way every time).

Every failure mode of the model's output (no block, invalid YAML, an invalid harness, a copy of the incumbent, a
reply cut off at ``max_tokens``) comes back as a rejected proposal with its reason; a server that does not answer
raises `ProposerUnavailable` (the leg records it and keeps the incumbent).
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable
from whale_core.proposers.context import build_compact_messages, compact_focus
from whale_core.proposers.llm import LLMProposer
from whale_core.proposers.serve import ServedModel, serve
from whale_core.seeds import request_seed

__all__ = ["MIN_REPLY_TOKENS", "ServedProposer"]

MIN_REPLY_TOKENS = 64
LOCAL_KEY = "local"  # transformers serve has no authentication; the OpenAI client wants some key


class ServedProposer(LLMProposer):
    """Harness candidates from a local chat model served by WHALE (see the module docstring).

    ``context_tokens`` bounds the prompt as the model's tokenizer counts it (chat template included);
    ``max_tokens`` bounds each reply; ``start_timeout`` bounds the server's first start (seconds).
    """

    def __init__(
        self,
        model: ServedModel,
        temperature: float = 0.7,
        timeout: float = 600,
        num_retries: int = 0,
        context_tokens: int = 2500,
        max_tokens: int = 400,
        device: str = "cpu",
        start_timeout: float = 300,
    ) -> None:
        super().__init__(
            model=f"openai/{model.path}",
            temperature=temperature,
            timeout=timeout,
            num_retries=num_retries,
            context_tokens=context_tokens,
            max_tokens=max_tokens,
        )
        self.served = model
        self.device = device
        self.start_timeout = start_timeout
        self.name = f"served:{model.path.name}"

    def __repr__(self) -> str:
        return f"ServedProposer(model={str(self.served.path)!r}, device={self.device!r}, timeout={self.timeout})"

    @cached_property
    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.served.path))

    def count(self, text: str) -> int:
        """Tokens in ``text`` by the model's tokenizer (no special tokens)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the chat-templated prompt, generation prompt included: what the server feeds the model."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def prompt_budget(self) -> int:
        """The prompt tokens one request may use: the configured budget, within the window less the reply."""
        return max(0, min(self.context_tokens, self.served.context_window - self.max_tokens))

    def messages(self, context: ProposalContext, index: int) -> tuple[list[dict[str, str]], int]:
        """The ``index``-th request's messages and the reply's token allowance (see the module docstring)."""
        focus = compact_focus(context.restrict_to, context.seed, context.iteration, index)
        messages = build_compact_messages(context, focus, self.prompt_budget(), self.count)
        used = self.prompt_tokens(messages)
        room = self.served.context_window - used
        if room < MIN_REPLY_TOKENS:
            raise self._unavailable(
                f"the prompt's fixed part alone is {used} tokens; with {MIN_REPLY_TOKENS} reply tokens it does not "
                f"fit the model's window of {self.served.context_window} positions (max_position_embeddings)"
            )
        return messages, min(self.max_tokens, room)

    def sampling(self, context: ProposalContext, index: int) -> dict[str, Any]:
        """Request parameters that make the server sample at ``temperature``, seeded per (seed, iteration, request).

        `transformers serve` applies a request's ``temperature`` to the model's generation config but keeps its
        ``do_sample`` (false for most checkpoints, SmolLM2 included: it logs "generation flags are not valid ...
        ['temperature']" and decodes greedily); a ``generation_config`` in the body replaces the model's, so it
        carries the end-of-turn and pad tokens too.
        """
        seed = request_seed(context.seed, context.iteration, index)
        if self.temperature <= 0:
            return {"seed": seed}
        tok = self.tokenizer
        config = {"do_sample": True, "temperature": self.temperature, "top_p": 0.95}
        config |= {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id or tok.eos_token_id}
        return {"seed": seed, "extra_body": {"generation_config": json.dumps(config)}}

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        """``k`` requests, one candidate each; see `Proposer`. Starts the server on first use."""
        if k <= 0:
            return []
        out: list[Proposal] = []
        seen = {entry.sha for entry in context.archive}
        for index in range(k):
            messages, reply_tokens = self.messages(context, index)  # checked to fit before the server starts
            if index == 0:
                self.api_base = serve(self.served, device=self.device, start_timeout=self.start_timeout).api_base
            try:
                reply, usage = self._complete(messages, max_tokens=reply_tokens, extra=self.sampling(context, index))
            except ProposerUnavailable as exc:
                if not out:
                    raise
                # the server died mid-leg: keep what came back (the leg scores it) and record why the rest is missing
                out.append(self._reject(None, f"request {index + 1} of {k} failed: {exc}"))
                break
            for prop in self._proposals(reply, context, 1, usage):
                if prop.harness is not None and prop.harness.sha in seen:
                    reason = "duplicate of an earlier candidate in this leg"
                    prop = Proposal(prop.text, None, "rejected", reason, self.name, usage=prop.usage)
                elif prop.harness is not None:
                    seen.add(prop.harness.sha)
                out.append(prop)
        return out

    def _api_key(self, litellm: Any) -> str | None:
        return LOCAL_KEY
