"""Chat-mode prompts: a harness's ``messages`` and its few-shot demos as alternating user/assistant turns, rendered
through the tokenizer's own chat template and tokenized with exactly the special tokens the template writes.

A chat harness is a list of message templates: optional leading system messages, then the conversation, whose last
message is a user message, or an assistant message right after a user message: a *reply prefix*, the opening of the
answer that the model continues (``"{{ a }}+{{ b }}="`` lets a small model finish the equation it knows from
pre-training instead of starting a reply from nothing). Few-shot demos are the natural chat few-shot, one exchange
per demo: a user turn (the last user message rendered on the demo) and an assistant turn (the reply prefix rendered
on the demo, if there is one, then the demo's encoded answer), after the system messages and before the problem's
own messages. The prompt ends with the template's generation prompt (``<|im_start|>assistant\\n``), or, with a reply
prefix, with the prefix itself (Hugging Face's ``continue_final_message``: nothing the template writes after the
last message's content, such as the end-of-turn token, is kept).

Tokenization: the template writes its own special tokens (SmolLM2's ``<|im_start|>`` is both its bos and its turn
marker; Llama 3 writes ``<|begin_of_text|>``), so the rendered text is tokenized without adding special tokens.
Adding them would put a second bos in front for tokenizers that prepend one; `prompt_ids` never does, and refuses
a rendering that starts with two.

Simplified, and why: the reply prefix can only be the final message (a prefix in the middle of a conversation would
be an ordinary assistant message); message content is plain text rendered by the harness sandbox, so a problem
field that spells a special token (``"<|im_end|>"``) is tokenized as that token, as the model's own chat template
would do with the same text (the suites shipped with WHALE have no such fields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from whale_core.harness.errors import RenderError
from whale_core.harness.render import context_for, render_source
from whale_core.suites.base import Problem

__all__ = ["apply_template", "chat_messages", "layout", "prompt_ids"]


def layout(roles: Sequence[str]) -> tuple[int, int, bool]:
    """``(n_system, demo_user, has_prefix)`` of a validated message list: how many leading system messages there
    are, the index of the user message rendered for each demo's user turn (the last user message), and whether the
    last message is an assistant reply prefix."""
    n_system = 0
    while n_system < len(roles) and roles[n_system] == "system":
        n_system += 1
    users = [i for i, r in enumerate(roles) if r == "user"]
    if not users:
        raise RenderError("messages", "a chat harness needs a user message")
    return n_system, users[-1], roles[-1] == "assistant"


def chat_messages(
    messages: Sequence[tuple[str, str]],
    instruction: str,
    problem: Problem,
    demos: Sequence[Problem],
    encode: Callable[[str], str],
) -> list[dict[str, str]]:
    """The conversation for ``problem``: leading system messages, one (user, assistant) exchange per demo, then the
    remaining messages rendered on the problem (ending with a user message or the reply prefix)."""
    n_system, demo_user, has_prefix = layout([role for role, _ in messages])
    ctx = context_for(problem, instruction)

    def one(i: int, context: Mapping[str, Any], pid: str) -> str:
        return render_source(messages[i][1], context, f"messages[{i}].content", pid)

    out = [{"role": messages[i][0], "content": one(i, ctx, problem.id)} for i in range(n_system)]
    for d in demos:
        dctx = context_for(d, instruction)
        opening = one(len(messages) - 1, dctx, d.id) if has_prefix else ""
        out.append({"role": "user", "content": one(demo_user, dctx, d.id)})
        out.append({"role": "assistant", "content": opening + encode(d.answer)})
    out += [{"role": messages[i][0], "content": one(i, ctx, problem.id)} for i in range(n_system, len(messages))]
    return out


def apply_template(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text from the tokenizer's own chat template: the generation prompt after a final user message, or
    the final assistant message left open (``continue_final_message``). Raises `RenderError` on any failure."""
    if tokenizer is None:
        raise RenderError("messages", "this harness is in chat mode (messages): render() needs a tokenizer")
    prefix = bool(messages) and messages[-1]["role"] == "assistant"
    try:
        if prefix:
            text = tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True)
        else:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as e:
        raise RenderError("messages", f"the tokenizer's chat template failed: {type(e).__name__}: {e}") from None
    if not isinstance(text, str):
        raise RenderError("messages", f"apply_chat_template returned {type(text).__name__}, expected str")
    return text


def prompt_ids(tokenizer: Any, texts: Sequence[str], chat: bool) -> list[list[int]]:
    """Token ids of rendered prompts. Text mode: with the tokenizer's usual special tokens (e.g. a bos). Chat mode:
    none added (the template wrote them); a chat prompt that starts with two bos tokens raises `RenderError`."""
    enc = tokenizer(list(texts), add_special_tokens=not chat).input_ids
    out = [list(ids) for ids in enc]
    bos = getattr(tokenizer, "bos_token_id", None)
    if chat and bos is not None:
        for ids in out:
            if ids[:2] == [bos, bos]:
                raise RenderError("messages", f"the chat template wrote two bos tokens ({tokenizer.bos_token!r}) first")
    return out
