"""The component-edit loop of an LLM proposer: one request per candidate, one harness component per request.

For each of a leg's ``k`` candidates (`LLMProposer` with ``edit: component``, the default for ``served:`` models):

1. the selector picks the component (`whale_core.proposers.components.select_components`);
2. the prompt shows that component's current value, its allowed form, its other values tried with their scores,
   its past rejections with their reasons and the failing traces (`context.build_component_messages`);
3. the request asks for the reply in the proposer's output mode (`whale_core.proposers.replies`); a provider that
   refuses the mode is asked again one mode down (``auto``). Where the proposer's own server enforces the schema
   (``served:``), the schema also requires one setting of the component (the *pivot*, rotating per request) to
   differ from its current value (`require_change`): a small model under a grammar otherwise copies the value back;
   the prompt names that setting;
4. the reply is read leniently (`read_json`), checked for the component's keys, merged into the incumbent
   (`merge`) and put through `check_candidate` — the same gate as every proposer — and checked against the archive
   and the leg's earlier candidates for duplicates;
5. a reply that fails any check is fed back **once** (``feedback_retries``, default 1): the reply and the
   validator's one-line reason go back as the next turn ("That reply was rejected: … Reply again …", as DSPy's
   GEPA adapter does), and the retry's tokens are charged to the same candidate;
6. a reply cut off at ``max_tokens`` (finish reason ``length``) is never adopted, whatever it parses to.

Every candidate comes back as one `Proposal` (valid, or rejected with ``"<component>: <reason>"``) carrying the
usage of all its requests. The run's proposer budget (`whale_core.proposers.spend`) is checked before each request.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from whale_core.harness import Harness
from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable, check_candidate
from whale_core.proposers.components import (
    COMPONENTS,
    Selector,
    check_shape,
    component_value,
    merge,
    require_change,
    select_components,
)
from whale_core.proposers.replies import (
    OUTPUT_MODES,
    Completion,
    OutputMode,
    ProviderRefused,
    read_json,
    response_format,
)
from whale_core.proposers.spend import ProposerBudgetSpent, Spend, add_usage

__all__ = ["Asker", "propose_components"]

FEEDBACK_REPLY_CHARS = 600  # how much of a rejected reply goes back to the model with the reason


class Asker(Protocol):
    """What the loop needs of a proposer (`whale_core.proposers.llm.LLMProposer` and its served subclass)."""

    name: str
    mode: OutputMode  # the mode in use (``auto`` steps it down)
    selector: Selector
    feedback_retries: int

    @property
    def output(self) -> str: ...  # the configured mode: auto | schema | json | fenced

    def component_messages(
        self, context: ProposalContext, component: str, current: str, form: str, fenced: bool, pivot: str | None
    ) -> tuple[list[dict[str, str]], int]: ...
    def fits(self, messages: list[dict[str, str]], reply_tokens: int) -> bool: ...
    def reply_schema(self, component: str, incumbent: Harness, reply_tokens: int) -> dict[str, Any]: ...
    def pivot(self, component: str, incumbent: Harness, turn: int) -> str | None: ...
    def request_extra(self, context: ProposalContext, index: int, attempt: int) -> dict[str, Any]: ...
    def ask(self, messages: list[dict[str, str]], max_tokens: int, extra: dict[str, Any]) -> Completion: ...
    def say(self, message: str) -> None: ...


def _reject(p: Asker, text: str | None, reason: str, usage: dict[str, float]) -> Proposal:
    return Proposal(text=text, harness=None, status="rejected", reason=reason, proposer=p.name, usage=usage)


def _feedback(reason: str) -> str:
    return reason.removeprefix("no change") or "the value is the same as the current one; write a different value"


def propose_components(p: Asker, context: ProposalContext, k: int, spend: Spend) -> list[Proposal]:
    """``k`` candidates, one component each (see the module docstring). Raises `ProposerBudgetSpent` when the budget
    was spent before the first request, `ProposerUnavailable` when the first request fails; a later failure ends the
    leg's proposing with a rejection that says why (what came back before it is kept)."""
    incumbent = Harness.from_text(context.incumbent.text)
    taken: dict[str, str] = {}
    for entry in context.archive:
        key = content_key(entry.text)
        if key is not None:
            taken.setdefault(key, f"archive entry {entry.sha[:12]} (status: {entry.status})")
    taken[str(content_key(incumbent.text))] = "the incumbent"
    out: list[Proposal] = []
    for index, component in enumerate(select_components(context, k, p.selector)):
        why = spend.exhausted()
        if why is not None:
            if not out:
                raise ProposerBudgetSpent(why)
            out.append(_reject(p, None, why, {}))
            break
        try:
            prop = _one(p, context, incumbent, component, index, spend, taken)
        except ProposerUnavailable as exc:
            if not out:
                raise
            out.append(_reject(p, None, f"request for candidate {index + 1} of {k} failed: {exc}", {}))
            break
        if prop.harness is not None:
            taken[str(content_key(prop.harness.text))] = "an earlier candidate of this leg"
        out.append(prop)
    return out


def content_key(text: str) -> str | None:
    """A harness's identity up to its name (component candidates are renamed ``<incumbent>.<component>``, so a value
    tried before comes back under another name); None for a text that is not a harness."""
    try:
        return Harness.from_text(text).evolve(name="x").sha
    except Exception:  # a rejected raw text in the archive: nothing to compare with
        return None


def _one(
    p: Asker,
    context: ProposalContext,
    incumbent: Harness,
    component: str,
    index: int,
    spend: Spend,
    taken: dict[str, str],
) -> Proposal:
    current = json.dumps(component_value(component, incumbent), ensure_ascii=False)
    keys = ", ".join(json.dumps(key) for key in json.loads(current))
    turns: list[dict[str, str]] = []
    usage: dict[str, float] = {}
    attempt = 0
    last_text: str | None = None
    last_reason = ""
    while True:
        mode = p.mode
        pivot = p.pivot(component, incumbent, index + attempt)
        form = COMPONENTS[component].form
        base, room = p.component_messages(context, component, current, form, mode == "fenced", pivot)
        messages = base + turns
        if turns and not p.fits(messages, room):
            return _reject(p, last_text, f"{last_reason} (no room in the model's window to feed it back)", usage)
        schema = p.reply_schema(component, incumbent, room)
        if pivot is not None:
            schema = require_change(schema, incumbent, pivot)
        fmt = response_format(mode, f"whale_{component}", schema)
        extra = p.request_extra(context, index, attempt) | ({"response_format": fmt} if fmt else {})
        try:
            reply = p.ask(messages, room, extra)
        except ProviderRefused as exc:
            if p.output != "auto" or mode == OUTPUT_MODES[-1]:
                raise
            p.mode = OUTPUT_MODES[OUTPUT_MODES.index(mode) + 1]
            usage = add_usage(usage, {"fallbacks": 1.0})
            p.say(f"the provider refused output mode {mode!r} ({str(exc)[:160]}); using {p.mode!r} from now on")
            continue
        except ProposerUnavailable as exc:
            if attempt == 0:
                raise
            # the fed-back retry failed: the candidate is rejected with what it cost so far (not lost from the spend)
            return _reject(p, last_text, f"{last_reason} (the retry failed: {str(exc)[:300]})", usage)
        spent = reply.usage | {"requests": 1.0}
        spend.add(spent)
        usage = add_usage(usage, spent)
        text, reason, harness, counters = _judge(p, context, incumbent, component, reply, taken, room)
        usage = add_usage(usage, counters)
        if harness is not None:
            return Proposal(harness.text, harness, "valid", None, p.name, usage=usage)
        last_text, last_reason = text, f"{component}: {reason}"
        if attempt >= p.feedback_retries or spend.exhausted() is not None:
            return _reject(p, text, last_reason, usage)
        attempt += 1
        usage = add_usage(usage, {"retries": 1.0})
        where = " inside one ```json block" if p.mode == "fenced" else ""
        turns = [
            {"role": "assistant", "content": reply.text[:FEEDBACK_REPLY_CHARS]},
            {
                "role": "user",
                "content": f"That reply was rejected: {_feedback(reason)}\nReply again with only a JSON object"
                f"{where} with the keys {keys}, holding a new value for `{component}`.",
            },
        ]


def _judge(
    p: Asker,
    context: ProposalContext,
    incumbent: Harness,
    component: str,
    reply: Completion,
    taken: dict[str, str],
    room: int,
) -> tuple[str | None, str, Harness | None, dict[str, float]]:
    """(stored text, reason, the harness when valid, counters) for one reply."""
    if reply.finish_reason == "length":
        reason = f"the reply was cut off at {room} tokens (finish reason 'length'): never adopted; write less"
        return reply.text or None, reason, None, {"truncated": 1.0}
    reading = read_json(reply.text)
    counters = {"repaired": 1.0} if reading.how == "repaired" else {}
    if reading.value is None:
        return reply.text or None, str(reading.problem), None, counters
    shape = check_shape(component, incumbent, reading.value)
    if shape is not None:
        return reply.text, shape, None, counters
    value: dict[str, Any] = reading.value
    if component == "prompt" and "prefix" not in value:
        value = {**value, "prefix": ""}
    try:
        text = merge(component, incumbent, value, rename=context.restrict_to is None)
    except Exception as exc:  # a value YAML cannot write (it came from JSON, so this is a WHALE bug): recorded
        return reply.text, f"the value could not be merged: {type(exc).__name__}: {exc}", None, counters
    checked = check_candidate(text, incumbent, context.restrict_to, proposer=p.name)
    if checked.harness is None:
        return text, str(checked.reason), None, counters
    key = str(content_key(checked.harness.text))
    if key in taken:
        what = taken[key]
        if what == "the incumbent":
            return text, "no change", None, counters
        return text, f"duplicate of {what}: write a value not tried before", None, counters
    return checked.harness.text, "", checked.harness, counters
