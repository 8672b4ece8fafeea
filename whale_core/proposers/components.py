"""One harness component at a time: what an LLM proposer changes per request, the JSON schema of its reply, the merge.

A small model cannot write a whole harness: SmolLM2-135M asked for complete YAML harnesses wrote 0 valid of 8. GEPA's
answer (``strategies/instruction_proposal.py``) is to ask for one component at a time and merge it into the
program; WHALE does the same for every part of a harness, not only the instruction. A *component* owns one or more
top-level harness fields:

============  ===========================================================================================
instruction   ``instruction``
prompt        ``template`` (text mode) or ``messages`` (chat mode), and ``prefix``
fewshot       ``fewshot`` (k, select, separator)
answer        ``answer`` (reverse, pad, sep)
parse         ``parse`` (the steps)
decoding      ``decoding`` (temperature, top_p, max_new_tokens, stop)
inference     ``inference`` (samples, aggregate)
============  ===========================================================================================

A reply is one JSON object holding exactly the component's fields, e.g. ``{"fewshot": {"k": 3, "select": "similar",
"separator": "\\n"}}``; `merge` writes it into the incumbent, so every other field stays as it was *by construction*
and the model never copies (or mangles) the rest of the harness. `schema` is the reply's JSON schema: sent as the
provider's ``response_format`` where it takes one, and enforced token by token by WHALE's own server for ``served:``
models (`whale_core.proposers.local_server`). The schemas of the nested settings come from the harness's own pydantic
models (one source of truth); the parse steps' schema is written here (a step is a one-key mapping, which pydantic's
schema cannot say). String lengths are capped at what the reply's token allowance can hold (``max_chars``): a longer
string would be cut off anyway, and a grammar that lets a string run on makes a small model ramble until the cut.

`select_components` orders the components for a leg's requests: ``round-robin`` (a seeded rotation) or ``traces``
(read the failing traces first: a completion that holds the right answer which the parse missed, or no parsed
answer at all, points at parse/decoding/prompt; wrong answers that parsed point at instruction/few-shot/prompt).
Only components whose fields the mode may change are offered (``instruction`` alone in prompt-weights mode).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from whale_core.harness import Harness
from whale_core.harness.spec import (
    MAX_INSTRUCTION_CHARS,
    MAX_PREFIX_CHARS,
    MAX_TEMPLATE_CHARS,
    AnswerFormat,
    Decoding,
    FewShot,
    Inference,
)
from whale_core.proposers.base import FailingTrace, ProposalContext
from whale_core.seeds import rotation_start

__all__ = [
    "COMPONENTS",
    "Component",
    "Selector",
    "component_value",
    "merge",
    "pivots",
    "reply_schema",
    "require_change",
    "select_components",
]

Selector = Literal["traces", "round-robin"]


@dataclass(frozen=True)
class Component:
    """A part of a harness the proposer may rewrite in one request: its name, the one-line form shown to the model
    (what the values mean and which they take)."""

    name: str
    form: str


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        Component("instruction", "the instruction text shown to the model (templates use it as {{ instruction }})"),
        Component(
            "prompt",
            "how a problem becomes the model's input: template is a Jinja2 text over the problem's fields (or "
            "messages: a list of {role, content} in chat mode); prefix is text after the prompt that the model "
            "continues from, e.g. ' The answer is' ('' = none)",
        ),
        Component(
            "fewshot",
            "k: solved examples put before the problem (0 to 16); select: random, first or similar; separator: the "
            "text between examples",
        ),
        Component(
            "answer",
            "how answers are written: reverse (digits last-first), pad (left-pad with zeros to this many characters, "
            "0 = none), sep (a separator between characters such as ' ' or ',', '' = none)",
        ),
        Component(
            "parse",
            "the steps turning the model's text into the answer, in order: {regex: '...'} (first capture group), "
            "{strip: true}, {first_line: true}, {last_line: true}, {int: true}, {after: 'answer is'} (the text after "
            "a cue), {number: first|last|new} (new: the first number the problem does not contain)",
        ),
        Component(
            "decoding",
            "temperature (0 = greedy, up to 2), top_p, max_new_tokens (1 to 512), stop (up to 4 stop strings, the "
            "completion is cut at the first)",
        ),
        Component(
            "inference",
            "samples: completions per problem (1 to 32); aggregate: majority or first (samples > 1 needs "
            "temperature > 0)",
        ),
    ]
}


def fields_of(component: str, harness: Harness) -> list[str]:
    """The top-level harness fields ``component`` owns for this harness (``prompt``: template or messages, prefix)."""
    if component == "prompt":
        return ["messages" if harness.is_chat else "template", "prefix"]
    return [component]


def component_value(component: str, harness: Harness) -> dict[str, Any]:
    """The component's current value, as the reply object would hold it (canonical: every default filled in)."""
    doc = yaml.safe_load(harness.text)
    return {name: doc.get(name, "" if name == "prefix" else None) for name in fields_of(component, harness)}


def allowed(component: str, restrict_to: frozenset[str] | None) -> bool:
    """Whether the mode lets ``component`` change (every field it may own is in ``restrict_to``)."""
    if restrict_to is None:
        return True
    owned = {"template", "messages", "prefix"} if component == "prompt" else {component}
    return owned <= restrict_to


# ---------------------------------------------------------------------------------------------------- schemas


def _model_schema(model: type[Any], max_chars: int) -> dict[str, Any]:
    """An object schema from one of the harness's pydantic models: every property required, no others, titles and
    defaults dropped, string lengths capped at ``max_chars``."""
    raw = model.model_json_schema()
    props: dict[str, Any] = {}
    for name, prop in raw["properties"].items():
        prop = {k: v for k, v in prop.items() if k not in ("title", "default", "description")}
        if prop.get("type") == "string" and "enum" not in prop:
            prop["maxLength"] = min(int(prop.get("maxLength", max_chars)), max_chars)
        if prop.get("type") == "array" and prop.get("items", {}).get("type") == "string":
            prop["items"] = {"type": "string", "minLength": 1, "maxLength": min(16, max_chars)}
        props[name] = prop
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _string(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_chars}


def _one_key(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: value}, "required": [key], "additionalProperties": False}


def _parse_schema(max_chars: int) -> dict[str, Any]:
    true = {"const": True}
    steps = [
        _one_key("regex", {"type": "string", "minLength": 1, "maxLength": min(200, max_chars)}),
        _one_key("strip", {"type": "boolean"}),
        _one_key("remove", {"type": "string", "minLength": 1, "maxLength": 16}),
        *(_one_key(op, true) for op in ("reverse", "lower", "upper", "first_line", "last_line", "int")),
        _one_key("number", {"enum": ["first", "last", "new"]}),
        _one_key("after", {"type": "string", "minLength": 1, "maxLength": 32}),
    ]
    return {"type": "array", "items": {"anyOf": steps}, "maxItems": 8}


def _field_schema(name: str, max_chars: int) -> dict[str, Any]:
    if name == "instruction":
        return _string(min(MAX_INSTRUCTION_CHARS, max_chars))
    if name == "template":
        return _string(min(MAX_TEMPLATE_CHARS, max_chars))
    if name == "prefix":
        return _string(min(MAX_PREFIX_CHARS, max_chars))
    if name == "messages":
        message = {
            "type": "object",
            "properties": {
                "role": {"enum": ["system", "user", "assistant"]},
                "content": _string(min(MAX_TEMPLATE_CHARS, max_chars)),
            },
            "required": ["role", "content"],
            "additionalProperties": False,
        }
        return {"type": "array", "items": message, "minItems": 1, "maxItems": 6}
    if name == "parse":
        return _parse_schema(max_chars)
    models = {"fewshot": FewShot, "answer": AnswerFormat, "decoding": Decoding, "inference": Inference}
    schema = _model_schema(models[name], max_chars)
    if name == "answer":  # the validator's rule for sep (no letters, digits or '-'), as a pattern the grammar keeps
        schema["properties"]["sep"]["pattern"] = r"^[^A-Za-z0-9\-]*$"
    return schema


def reply_schema(component: str, harness: Harness, max_chars: int = 600) -> dict[str, Any]:
    """The JSON schema of a reply that rewrites ``component`` of ``harness`` (see the module docstring)."""
    names = fields_of(component, harness)
    return {
        "type": "object",
        "properties": {name: _field_schema(name, max_chars) for name in names},
        "required": names,
        "additionalProperties": False,
    }


# ------------------------------------------------------------------------------------------------------ merge


def check_shape(component: str, harness: Harness, reply: Any) -> str | None:
    """Why ``reply`` is not an object with exactly the component's keys (None when it is). Types and values are left
    to the harness's own validator, whose messages name the field."""
    names = fields_of(component, harness)
    example = json.dumps(component_value(component, harness), ensure_ascii=False)[:300]
    if not isinstance(reply, dict):
        return f"the reply is a JSON {type(reply).__name__}, not an object like {example}"
    missing = [n for n in names if n not in reply and n != "prefix"]
    extra = [k for k in reply if k not in names]
    if missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unexpected {', '.join(repr(str(k))[:40] for k in extra[:4])}"] if extra else []
        )
        return f"the object must have exactly the keys {', '.join(map(repr, names))} ({'; '.join(parts)})"
    return None


def merge(component: str, incumbent: Harness, reply: dict[str, Any], rename: bool = True) -> str:
    """The incumbent's YAML text with the reply's fields written over the component's (not validated here: the
    caller runs `check_candidate`). ``rename``: name the result ``<incumbent name>.<component>`` (kept within the
    80-character limit by dropping the oldest parts); off where the name may not change (restricted modes)."""
    doc = yaml.safe_load(incumbent.text)
    for name in fields_of(component, incumbent):
        if name in reply:
            doc[name] = reply[name]
    if rename:
        name = f"{incumbent.name}.{component}"
        while len(name) > 80 and "." in name:
            name = name.split(".", 1)[1]
        doc["name"] = name[-80:]
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10_000)


# --------------------------------------------------------------------------------------------------- selector

_MISSED_ANSWER_ORDER = ["parse", "decoding", "prompt", "instruction", "fewshot", "answer", "inference"]
_WRONG_ANSWER_ORDER = ["instruction", "fewshot", "prompt", "decoding", "inference", "answer", "parse"]


def _missed(trace: FailingTrace) -> bool:
    """The model's text holds the right answer that the parse did not get, or nothing parsed at all."""
    gold = trace.gold.strip()
    return trace.parsed is None or bool(trace.error) or (bool(gold) and gold in trace.completion)


def select_components(context: ProposalContext, k: int, selector: Selector = "traces") -> list[str]:
    """The component each of a leg's ``k`` requests rewrites (see the module docstring). ``traces``: when at least
    half of the failing traces are missed answers, parse/decoding/prompt come first, else instruction/few-shot/prompt;
    either way every allowed component is reached once ``k`` exceeds the ones before it. Without traces, or with
    ``round-robin``, a rotation seeded by (run seed, iteration)."""
    names = [name for name in COMPONENTS if allowed(name, context.restrict_to)] or ["instruction"]
    traces = context.failing_traces
    if selector == "traces" and traces:
        missed = sum(_missed(t) for t in traces)
        order = _MISSED_ANSWER_ORDER if 2 * missed >= len(traces) else _WRONG_ANSWER_ORDER
        names = [name for name in order if name in names]
    else:
        start = rotation_start(context.seed, context.iteration, len(names))
        names = names[start:] + names[:start]
    return [names[i % len(names)] for i in range(max(0, k))]


# ------------------------------------------------------------------------------------------- a required change

_PIVOTS = {
    "instruction": ["instruction"],
    "prompt": ["template", "prefix"],
    "fewshot": ["fewshot.k", "fewshot.select", "fewshot.separator"],
    "answer": ["answer.reverse", "answer.pad", "answer.sep"],
    "parse": ["parse"],
    "decoding": ["decoding.max_new_tokens", "decoding.stop"],
    "inference": ["inference.samples", "inference.aggregate"],
}


def pivots(component: str, harness: Harness) -> list[str]:
    """The settings of ``component`` a request may be required to change (dotted paths within the reply)."""
    if component == "prompt" and harness.is_chat:
        return ["messages", "prefix"]
    return list(_PIVOTS[component])


def require_change(schema: dict[str, Any], harness: Harness, pivot: str) -> dict[str, Any]:
    """``schema`` with the ``pivot`` setting's current value excluded, so every reply the schema admits is a change
    (a small model under a grammar otherwise copies the current value back; JSON schema has no ``not`` that grammar
    engines implement, so the exclusion is written positively): an enum or a boolean loses the current value, a
    small integer range becomes the enum of the other values, a string or a list must differ in length."""
    import copy

    out = copy.deepcopy(schema)
    *parents, leaf = pivot.split(".")
    node = out
    value: Any = yaml.safe_load(harness.text)
    for name in parents:
        node = node["properties"][name]
        value = value.get(name, {})
    current = value.get(leaf, "" if leaf == "prefix" else None)
    prop = node["properties"][leaf]
    node["properties"][leaf] = _excluding(prop, current)
    return out


def _excluding(prop: dict[str, Any], current: Any) -> dict[str, Any]:
    if "enum" in prop and current in prop["enum"] and len(prop["enum"]) > 1:
        return {"enum": [v for v in prop["enum"] if v != current]}
    kind = prop.get("type")
    if kind == "boolean" and isinstance(current, bool):
        return {"enum": [not current]}
    if kind == "integer" and isinstance(current, int):
        lo, hi = int(prop.get("minimum", 0)), int(prop.get("maximum", current + 64))
        if hi - lo <= 64:
            return {"enum": [v for v in range(lo, hi + 1) if v != current]}
        return {"anyOf": [{**prop, "maximum": current - 1}, {**prop, "minimum": current + 1}]}
    if kind == "string" and isinstance(current, str):
        limit = int(prop.get("maxLength", 10_000))
        shorter = [{**prop, "maxLength": len(current) - 1}] if current else []
        return {"anyOf": [*shorter, {**prop, "minLength": len(current) + 1, "maxLength": max(limit, len(current) + 1)}]}
    if kind == "array" and isinstance(current, list):
        limit = int(prop.get("maxItems", 64))
        fewer = [{**prop, "maxItems": len(current) - 1}] if current else []
        return {"anyOf": [*fewer, {**prop, "minItems": len(current) + 1, "maxItems": max(limit, len(current) + 1)}]}
    return prop  # nothing to exclude by construction (a number): the validator's "no change" still applies
