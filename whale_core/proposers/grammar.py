"""Constrained decoding for the served proposer: a JSON schema (or any JSON object) enforced token by token.

`Grammar` wraps the model's tokenizer once for ``llguidance`` (Microsoft's grammar engine, the one behind
Guidance, vLLM's and SGLang's ``guidance`` backends and llama.cpp's ``%llguidance``) and builds, per request, a
Hugging Face ``LogitsProcessor`` that masks every token the schema does not allow at that point — so a reply parses
by construction — and allows only end-of-sequence once the object is complete.

Chosen by measurement (``benchmarks/constrained_decoding.py``, SmolLM2-135M on 2 CPU cores, transformers 5.24):
llguidance adds one 3 MB wheel (no dependency beyond what WHALE has), compiles a component schema in milliseconds,
and costs little per token; xgrammar pulls ``triton`` (~1 GB installed); lm-format-enforcer is pure Python and
slower per token; outlines brings the largest dependency tree. The figures are in docs/real-model.md.

Simplified: the mask is applied with plain tensor operations (llguidance's own helper is ``torch.compile``-d,
which needs a C compiler and costs tens of seconds on a CPU's first request); batch size 1 (the proposer asks one
request at a time).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Grammar", "GrammarError"]


# One line, with the separators models write themselves (``{"k": 2, "select": "first"}``): free whitespace lets a
# small model emit newlines until max_tokens; keywords llguidance does not implement are ignored, not fatal.
_JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


class GrammarError(ValueError):
    """The schema cannot be compiled into a grammar (the message says why)."""


class Grammar:
    """Grammar-constrained logits processors for one tokenizer (built once: wrapping a tokenizer takes ~1 s)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import llguidance.hf

        self.vocab_size = vocab_size
        self.eos = tokenizer.eos_token_id
        self.lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)

    def json_schema(self, schema: dict[str, Any]) -> Any:
        """A processor that keeps the reply within ``schema`` (one JSON value, nothing around it)."""
        import llguidance

        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=_JSON_OPTIONS)
        except ValueError as exc:
            raise GrammarError(str(exc)) from None
        return self._processor(grammar)

    def json_object(self) -> Any:
        """A processor that keeps the reply one JSON object (JSON mode)."""
        return self.json_schema({"type": "object"})

    def _processor(self, grammar: str) -> Any:
        import llguidance
        import torch
        from transformers import LogitsProcessor

        error = llguidance.LLMatcher.validate_grammar(grammar, self.lltok)
        if error:
            raise GrammarError(error)
        lltok, vocab, eos = self.lltok, self.vocab_size, self.eos
        words = (vocab + 31) // 32
        bits = torch.arange(32, dtype=torch.int32)

        class JsonProcessor(LogitsProcessor):  # type: ignore[misc]
            """Masks the logits to the tokens the grammar allows next (see the module docstring)."""

            def __init__(self) -> None:
                self.matcher = llguidance.LLMatcher(lltok, grammar)
                self.mask = torch.zeros((1, words), dtype=torch.int32)
                self.start: int | None = None

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                if self.start is None:
                    self.start = input_ids.shape[1]
                else:
                    self.matcher.consume_token(int(input_ids[0, -1]))
                if self.matcher.is_error() or self.matcher.is_stopped():
                    allowed = torch.zeros(scores.shape[-1], dtype=torch.bool)
                    if eos is not None and eos < scores.shape[-1]:
                        allowed[eos] = True
                else:
                    row = self.mask[0]
                    self.matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
                    allowed = ((self.mask[0].unsqueeze(1) >> bits) & 1).flatten().bool()[: scores.shape[-1]]
                    missing = scores.shape[-1] - allowed.shape[0]  # model rows past the tokenizer's vocabulary
                    if missing > 0:
                        allowed = torch.cat([allowed, torch.zeros(missing, dtype=torch.bool)])
                return scores.masked_fill(~allowed.to(scores.device), float("-inf"))

        return JsonProcessor()
