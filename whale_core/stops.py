"""Where a completion ends: the one stop rule shared by evaluation (`whale_core.rollout`) and training
(`whale_core.legs.weights_leg`, whose rewards parse what TRL decoded), so a weights leg is rewarded on completions cut
exactly as they are scored.

The rule, for a harness's ``decoding.stop`` strings:
1. Generation ends at an *end token*: the tokenizer's EOS, every EOS id of the model's generation config (instruct
   models often list several, e.g. ``<|im_end|>`` and ``<|endoftext|>``), and each stop string that is exactly one
   token which decodes back to itself (a free extra EOS id). `end_token_ids`.
2. The completion is its tokens up to and including the first end token, decoded without special tokens, then cut
   before the earliest stop string (`whale_core.harness.parse.cut_at_stop`). `finish`. The text cut is what matters
   on BPE tokenizers, where a stop string such as ``"\\n"`` is often merged into a bigger token (``".\\n"``,
   ``"\\n\\n"``) that no end-token id matches.

Simplified: stop strings longer than one token also end *evaluation*'s generation early (transformers'
``stop_strings``, a speed-up: the text is cut the same way either way); TRL's generation cannot take them, so a weights
leg generates past them and its loss covers those trailing tokens, while its reward parses the same cut text. With a
population of harnesses, training ends only on the single-token stops every member shares; each member still cuts its
own completions at its own stop strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from whale_core.harness.parse import cut_at_stop

__all__ = ["cut_at_stop", "end_token_ids", "finish", "multi_token_stops", "single_token_stop"]


def single_token_stop(tokenizer: Any, stop: str) -> int | None:
    """The id of ``stop`` when it is exactly one token that decodes back to ``stop``; else None."""
    if not stop:
        return None
    ids = tokenizer(stop, add_special_tokens=False).input_ids
    if len(ids) == 1 and tokenizer.decode(ids) == stop:
        return int(ids[0])
    return None


def multi_token_stops(tokenizer: Any, stops: Sequence[str]) -> list[str]:
    """The stop strings that are not a single token (evaluation hands them to ``generate`` as ``stop_strings``)."""
    return [s for s in stops if s and single_token_stop(tokenizer, s) is None]


def end_token_ids(tokenizer: Any, model: Any, stop_lists: Sequence[Sequence[str]]) -> list[int]:
    """Token ids that end generation: the tokenizer's EOS first, the model generation config's EOS ids, then the
    single-token stops common to every list in ``stop_lists`` (one list per harness; usually just one)."""
    ids: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for i in [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or []):
        if int(i) not in ids:
            ids.append(int(i))
    shared: set[int] | None = None
    for stops in stop_lists:
        one = {i for i in (single_token_stop(tokenizer, s) for s in stops) if i is not None}
        shared = one if shared is None else shared & one
    for s in stop_lists[0] if stop_lists else ():
        i = single_token_stop(tokenizer, s)
        if i is not None and i in (shared or set()) and i not in ids:
            ids.append(i)
    return ids


def finish(tokenizer: Any, token_ids: Sequence[int], end_ids: Sequence[int], stops: Sequence[str]) -> tuple[str, int]:
    """A generated completion's text and token count: tokens up to and including the first of ``end_ids``, decoded
    without special tokens, cut before the earliest stop string. The count includes the end token."""
    ends = set(end_ids)
    n = next((k + 1 for k, t in enumerate(token_ids) if t in ends), len(token_ids))
    return cut_at_stop(tokenizer.decode(list(token_ids[:n]), skip_special_tokens=True), stops), n
