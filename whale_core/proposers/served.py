"""The ``served`` proposer: a local instruct model, served by WHALE itself, proposes harnesses through litellm.

``search.proposer=served:/path/to/hf-dir`` or ``served:NAME`` (a named, installed model). The model's server is
started on first use in the process and reused by every later leg (`whale_core.proposers.serve`); requests go
through litellm's OpenAI client exactly as for a hosted provider (`LLMProposer`), so timeouts, retries and usage
are the same.

What differs from the hosted `llm` proposer, for models of ~100 M–1 B parameters on a CPU:

- **one component per request** (``search.edit: component``, the default here): each of the ``k`` requests asks
  for a new value of one harness component as a JSON object, which is merged into the incumbent
  (`whale_core.proposers.edits`); the reply's JSON schema goes as ``response_format`` and WHALE's server enforces
  it token by token (`whale_core.proposers.local_server`, `whale_core.proposers.grammar`), so every reply parses
  unless it is cut off at ``max_tokens``; a rejected reply is fed back once with the reason. ``edit: whole`` keeps
  the earlier way — one complete harness per request from the compact prompt (`build_compact_messages`), which a
  135 M model does not manage (0 valid of 8, docs/real-model.md);
- **the model's own tokenizer** counts the prompt: the chat-templated messages must fit
  ``min(context_tokens, window - max_tokens)`` where ``window`` is the model's ``max_position_embeddings``; the
  builders trim archive lines and traces to fit. A prompt whose fixed part alone leaves less than ``max_tokens``
  asks for fewer new tokens; one that leaves less than `MIN_REPLY_TOKENS` is never sent (`ProposerUnavailable`
  naming the sizes: it would fail the same way every time).

Every failure mode of the model's output (no JSON, a value the harness validator refuses, a copy of the incumbent,
a reply cut off at ``max_tokens``) comes back as a rejected proposal with its reason; a server that does not answer
raises `ProposerUnavailable` (the leg records it and keeps the incumbent).
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from whale_core.harness import Harness
from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable
from whale_core.proposers.components import Selector, pivots, reply_schema
from whale_core.proposers.context import build_compact_messages, build_component_messages, compact_focus
from whale_core.proposers.llm import Completion, Edit, LLMProposer, Output
from whale_core.proposers.serve import ServedModel, serve
from whale_core.proposers.spend import ProposerBudgetSpent, Spend
from whale_core.seeds import request_seed

__all__ = ["MIN_REPLY_TOKENS", "ServedProposer"]

MIN_REPLY_TOKENS = 64
FEEDBACK_SEED_STRIDE = 1000  # a fed-back retry samples with its own seed: request index + stride x attempt
LOCAL_KEY = "local"  # the local server has no authentication; the OpenAI client wants some key


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
        edit: Edit = "component",
        output: Output = "schema",
        selector: Selector = "traces",
        feedback_retries: int = 1,
        budget_tokens: int | None = None,
    ) -> None:
        super().__init__(
            model=f"openai/{model.path}",
            temperature=temperature,
            timeout=timeout,
            num_retries=num_retries,
            context_tokens=context_tokens,
            max_tokens=max_tokens,
            edit=edit,
            output=output,
            selector=selector,
            feedback_retries=feedback_retries,
            budget_tokens=budget_tokens,
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
        return messages, self._room(messages)

    def _room(self, messages: list[dict[str, str]]) -> int:
        """The reply tokens ``messages`` leave in the window (at most ``max_tokens``); `ProposerUnavailable` naming
        the sizes when fewer than `MIN_REPLY_TOKENS` (the request would fail the same way every time)."""
        used = self.prompt_tokens(messages)
        room = self.served.context_window - used
        if room < MIN_REPLY_TOKENS:
            raise self._unavailable(
                f"the prompt's fixed part alone is {used} tokens; with {MIN_REPLY_TOKENS} reply tokens it does not "
                f"fit the model's window of {self.served.context_window} positions (max_position_embeddings)"
            )
        return min(self.max_tokens, room)

    def sampling(self, context: ProposalContext, index: int) -> dict[str, Any]:
        """Request parameters that make the server sample at ``temperature``, seeded per (seed, iteration, request).

        Sent as a ``generation_config`` in the body, the form both WHALE's server and `transformers serve` read
        (the latter applies a bare ``temperature`` but keeps the checkpoint's ``do_sample``, false for SmolLM2, and
        decodes greedily); it carries the end-of-turn and pad tokens too.
        """
        seed = request_seed(context.seed, context.iteration, index)
        if self.temperature <= 0:
            return {"seed": seed}
        tok = self.tokenizer
        config = {"do_sample": True, "temperature": self.temperature, "top_p": 0.95}
        config |= {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id or tok.eos_token_id}
        return {"seed": seed, "extra_body": {"generation_config": json.dumps(config)}}

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        """``k`` candidates, one request (two with the error fed back) each; see `Proposer`. ``edit: component``
        (the default) asks for one component per request; ``whole`` for one complete harness per request (the
        compact prompt). Starts the server on first use."""
        if k <= 0:
            return []
        if self.edit == "component":
            return super().propose(context, k)
        spend = Spend(self.budget_tokens, self.budget_usd, before=dict(context.proposer_spent))
        out: list[Proposal] = []
        seen = {entry.sha for entry in context.archive}
        for index in range(k):
            why = spend.exhausted()
            if why is not None:
                if not out:
                    raise ProposerBudgetSpent(why)
                out.append(self._reject(None, why))
                break
            messages, reply_tokens = self.messages(context, index)  # checked to fit before the server starts
            try:
                reply = self.ask(messages, reply_tokens, self.sampling(context, index))
            except ProposerUnavailable as exc:
                if not out:
                    raise
                # the server died mid-leg: keep what came back (the leg scores it) and record why the rest is missing
                out.append(self._reject(None, f"request {index + 1} of {k} failed: {exc}"))
                break
            usage = reply.usage | {"requests": 1.0}
            spend.add(usage)
            if reply.finish_reason == "length":
                reason = f"the reply was cut off at {reply_tokens} tokens (finish reason 'length'): never adopted"
                out.append(Proposal(reply.text, None, "rejected", reason, self.name, usage=usage | {"truncated": 1.0}))
                continue
            for prop in self._proposals(reply.text, context, 1, usage):
                if prop.harness is not None and prop.harness.sha in seen:
                    reason = "duplicate of an earlier candidate in this leg"
                    prop = Proposal(prop.text, None, "rejected", reason, self.name, usage=prop.usage)
                elif prop.harness is not None:
                    seen.add(prop.harness.sha)
                out.append(prop)
        return out

    # -- the component loop's hooks, measured with the model's own tokenizer and window --------------------------

    def component_messages(
        self, context: ProposalContext, component: str, current: str, form: str, fenced: bool, pivot: str | None
    ) -> tuple[list[dict[str, str]], int]:
        budget = self.prompt_budget()
        messages = build_component_messages(context, component, current, form, fenced, budget, self.count, pivot)
        return messages, self._room(messages)

    def reply_schema(self, component: str, incumbent: Harness, reply_tokens: int) -> dict[str, Any]:
        """As `LLMProposer.reply_schema`, with strings capped at one character per reply token (less the object's
        keys): under the grammar a small model fills a string to its cap, and digits or symbols tokenize at one or
        two characters a token, so a looser cap ends in a reply cut off at ``max_tokens``."""
        return reply_schema(component, incumbent, max_chars=max(32, reply_tokens - 48))

    def pivot(self, component: str, incumbent: Harness, turn: int) -> str | None:
        """The setting this request must change, in rotation (WHALE's server enforces it; see `require_change`)."""
        options = pivots(component, incumbent)
        return options[turn % len(options)]

    def fits(self, messages: list[dict[str, str]], reply_tokens: int) -> bool:
        return self.served.context_window - self.prompt_tokens(messages) >= min(reply_tokens, MIN_REPLY_TOKENS)

    def request_extra(self, context: ProposalContext, index: int, attempt: int) -> dict[str, Any]:
        return self.sampling(context, index + FEEDBACK_SEED_STRIDE * attempt)

    def ask(self, messages: list[dict[str, str]], max_tokens: int, extra: dict[str, Any]) -> Completion:
        """One request to the served model (its server started on the first)."""
        self.api_base = serve(self.served, device=self.device, start_timeout=self.start_timeout).api_base
        return self._complete(messages, max_tokens=max_tokens, extra=extra)

    def _api_key(self, litellm: Any) -> str | None:
        return LOCAL_KEY
