"""Structured replies from an LLM proposer: the output modes it asks for, and the lenient reading of what came back.

Output modes, strongest first (`OUTPUT_MODES`):

- ``schema``: the component's JSON schema as the provider's ``response_format`` (``{"type": "json_schema", ...}``,
  OpenAI structured outputs; litellm translates it for the providers that take one). WHALE's own server enforces it
  token by token for ``served:`` models, so those replies parse by construction;
- ``json``: JSON mode (``{"type": "json_object"}``): valid JSON, shape not enforced;
- ``fenced``: no ``response_format``; the prompt asks for one fenced ```json block.

``auto`` starts at ``schema`` and steps down when the provider refuses the request (HTTP 400/422, or litellm's
``UnsupportedParamsError``), remembering the mode for that endpoint for the rest of the process; every step down
is counted (``fallbacks`` in the usage) and said in the leg's log.

Whatever the mode, `read_json` reads a reply the same lenient way — the whole reply as JSON, else the first fenced
block, else the first ``{...}`` span — and repairs near-JSON (single quotes, trailing commas, a missing brace) with
the ``json-repair`` library rather than hand-written regexes. A repaired reply is counted (``repaired``) but used:
the harness validator still checks every value. Text that repairs to nothing (or to a non-object) is a failure
with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from whale_core.proposers.base import ProposerUnavailable

__all__ = ["OUTPUT_MODES", "Completion", "OutputMode", "ProviderRefused", "Reading", "read_json", "response_format"]

OutputMode = Literal["schema", "json", "fenced"]
OUTPUT_MODES: tuple[OutputMode, ...] = ("schema", "json", "fenced")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
MAX_JSON_CHARS = 40_000  # a component's value is small; a reply longer than this is not read further


@dataclass(frozen=True)
class Completion:
    """One reply: its text (redacted, bounded), the finish reason the provider gave (``stop``, ``length``, ...) and
    its usage (`whale_core.proposers.spend.USAGE_KEYS`)."""

    text: str
    finish_reason: str
    usage: dict[str, float]


class ProviderRefused(ProposerUnavailable):
    """The provider refused the request itself (HTTP 400/422 or an unsupported parameter): in ``auto`` output mode
    the request is made again one mode down."""


@dataclass(frozen=True)
class Reading:
    """What `read_json` made of a reply: the value (None when nothing usable), how it was found (``json`` |
    ``fenced`` | ``span`` | ``repaired``), and the problem when there is no value."""

    value: Any
    how: str
    problem: str | None = None


def response_format(mode: OutputMode, name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response_format`` request parameter for ``mode`` (None for ``fenced``)."""
    if mode == "schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json":
        return {"type": "json_object"}
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _MISSING


_MISSING = object()


def _candidates(reply: str) -> list[tuple[str, str]]:
    """The places a JSON object may be, in the order they are tried: the whole reply, fenced blocks, the span from
    the first ``{`` to the last ``}``."""
    out = [("json", reply.strip())]
    for match in _FENCE.finditer(reply):
        if match.group(1).lower() in ("", "json", "json5", "javascript"):
            out.append(("fenced", match.group(2).strip()))
    start, end = reply.find("{"), reply.rfind("}")
    if 0 <= start < end:
        out.append(("span", reply[start : end + 1]))
    return out


def read_json(reply: str) -> Reading:
    """The JSON object in ``reply`` (see the module docstring); never raises."""
    reply = reply[:MAX_JSON_CHARS]
    places = _candidates(reply)
    for how, text in places:
        value = _loads(text)
        if isinstance(value, dict):
            return Reading(value, how)
    from json_repair import repair_json  # imported on first need

    for _, text in places[1:] + places[:1]:  # a fenced block is the likeliest home of the intended object
        try:
            value = repair_json(text, return_objects=True, skip_json_loads=True)
        except Exception:  # the repair library must not crash a leg: try the next place
            continue
        if isinstance(value, dict) and value:
            return Reading(value, "repaired")
    if not reply.strip():
        return Reading(None, "none", "the reply was empty")
    return Reading(None, "none", "no JSON object found in the reply (even after repairing near-JSON)")
