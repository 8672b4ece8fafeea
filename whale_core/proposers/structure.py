"""Structural operators of the `mutate` proposer: the format fixes a person makes by hand on a new task.

The classic operators (`whale_core.proposers.mutate`) edit the instruction, the answer encoding, few-shot, decoding,
samples and a few normalization steps. On a task WHALE was not shaped for, what matters is often elsewhere: how the
problem is *framed* (a QA scaffold, or plain text for a base model to continue), where the completion *stops*,
*which number* the parse takes (a model that echoes the question before answering), and an *answer prefix* the
model continues from. These operators search that space (``search.mutate_space: structural``):

- ``framing``: rewrite a text-mode template from its *core* — the template with the instruction reference, a
  leading label ("Question:", "Q:", "Problem:", "Input:") and a trailing answer label ("Answer:", "A:", ...) taken
  off — as one of `FRAMINGS`: QA with or without the instruction, "Q:/A:", plain text to continue (the trailing
  question stub "?" trimmed, a field's through the ``trim`` filter), or a reasoning framing (prefix "Let's think step
  by step.", the last number parsed, more tokens);
- ``stops``: one stop string from `STOPS` (or none), with ``max_new_tokens`` kept consistent (a short stop gets a
  short budget, no stop at most 32 tokens);
- ``parse_pick``: which part of the completion is the answer: the first, last or first *new* number (one the
  problem's fields did not write), the number after a cue ("answer is", "="), the first line or the first word —
  placed after the encoding's own ``remove`` steps;
- ``prefix``: an answer prefix from `PREFIXES` (or none).

Coverage first (`bundles`): random draws rarely compose a framing with the stop and parse that make it work (on
SmolLM2 × a number-sequence task, 8 random structural candidates found 0.020 where the plain framing scores 0.717),
so a structural `mutate` first proposes each of `BUNDLES` — the incumbent as plain text with a newline stop and, for
a numeric parse, the first new number; with three demos; as Q:/A:; step by step; as bare QA — up to half of k per
leg, each once per archive (a bundle already scored is not proposed again), then random edits.

None of them reads a problem, a trace or a gold answer: they see the harness text alone. Chat-mode harnesses keep
their messages (``framing`` applies to text templates; a chat template with a reply prefix is reachable by hand or
by an LLM proposer). Simplified: the core is found by the labels above, in English; a template the rules do not
recognise keeps its framing.
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any

Spec = dict[str, Any]

FRAMINGS: tuple[str, ...] = ("qa", "qa-bare", "q-a", "plain", "reason")
STOPS: tuple[str | None, ...] = ("\n", ",", ";", " ", ".", None)
PREFIXES: tuple[str, ...] = (" The answer is", " Answer:", " =", "")
CUES: tuple[str, ...] = ("answer is", "=")
REASON_PREFIX = " Let's think step by step."

_INSTRUCTION = re.compile(r"\{\{-?\s*instruction\s*-?\}\}")
_LEAD_LABEL = re.compile(r"^\s*(?:question|q|problem|input)\s*:\s*", re.IGNORECASE)
_ANSWER_LABEL = re.compile(r"^\s*(?:answer|a|output|result|solution)\s*:?\s*$", re.IGNORECASE)
_TRAIL_LABEL = re.compile(r"\s*(?:answer|a|output|result)\s*:\s*$", re.IGNORECASE)
_LAST_FIELD = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}(\s*\?\s*)?$")
_NUMBER_STEPS = ("number", "after", "first_line", "regex")


def template_core(template: str) -> str | None:
    """The problem's own text in a template: the instruction reference and the QA labels taken off (see the module
    docstring); None when nothing that renders a field is left."""
    lines = [ln for ln in template.split("\n") if _INSTRUCTION.sub("", ln).strip()]
    if lines and _ANSWER_LABEL.match(lines[-1]):
        lines.pop()
    if not lines:
        return None
    lines[0] = _LEAD_LABEL.sub("", lines[0], count=1)
    lines[-1] = _TRAIL_LABEL.sub("", lines[-1])
    core = "\n".join(lines).strip()
    return core if "{{" in core else None


def _plain(core: str) -> str:
    """``core`` as text to continue: a trailing "?" dropped, the last field through ``trim(' ?')``."""
    core = core.rstrip()
    core = core[:-1].rstrip() if core.endswith("?") else core
    m = _LAST_FIELD.search(core)
    if m:
        core = core[: m.start()] + "{{ " + m.group(1) + " | trim(' ?') }}"
    return core


def frame(core: str, framing: str) -> str:
    """The template of ``framing`` (one of `FRAMINGS`) around ``core``."""
    if framing == "qa":
        return "{{ instruction }}\nQuestion: " + core + "\nAnswer:"
    if framing == "qa-bare":
        return "Question: " + core + "\nAnswer:"
    if framing == "q-a":
        return "Q: " + core + "\nA:"
    if framing == "plain":
        return _plain(core)
    if framing == "reason":
        return "{{ instruction }}\nQuestion: " + core + "\nAnswer:"
    raise ValueError(f"unknown framing {framing!r} (one of {', '.join(FRAMINGS)})")


def _reframe(spec: Spec, core: str, framing: str) -> None:
    """Put ``core`` in ``framing``; the reasoning framing brings its prefix, last-number parse, blank-line stop and
    room to think, and any other framing drops that prefix."""
    spec["template"] = frame(core, framing)
    decoding = spec["decoding"]
    if framing == "reason":
        spec["prefix"] = REASON_PREFIX
        _set_pick(spec, [{"number": "last"}])
        decoding["stop"] = ["\n\n"]
        decoding["max_new_tokens"] = max(decoding["max_new_tokens"], 128)
    elif spec.get("prefix") == REASON_PREFIX:
        spec.pop("prefix")


def op_framing(spec: Spec, rng: random.Random) -> bool:
    """Another framing of a text template (see the module docstring); False for chat mode or an unknown shape."""
    template = spec.get("template")
    if not isinstance(template, str):
        return False
    core = template_core(template)
    if core is None:
        return False
    options = [f for f in FRAMINGS if frame(core, f) != template or f == "reason"]
    framing = rng.choice(options)
    _reframe(spec, core, framing)
    decoding = spec["decoding"]
    if framing == "plain" and decoding["stop"] in ([], ["\n"]):
        decoding["stop"] = [rng.choice([",", "\n", " "])]  # a continued text ends its answer at a delimiter
        decoding["max_new_tokens"] = min(decoding["max_new_tokens"], 16)
    return True


def op_stops(spec: Spec, rng: random.Random) -> bool:
    """One stop string of `STOPS` (or none) instead of the current ones; ``max_new_tokens`` to match."""
    decoding = spec["decoding"]
    options = [s for s in STOPS if ([s] if s else []) != decoding["stop"]]
    stop = rng.choice(options)
    decoding["stop"] = [stop] if stop else []
    if stop in (",", ";", " ", "."):
        decoding["max_new_tokens"] = min(decoding["max_new_tokens"], 16)
    elif stop is None:
        decoding["max_new_tokens"] = min(decoding["max_new_tokens"], 32)
    return True


def _set_pick(spec: Spec, pick: list[dict[str, Any]]) -> None:
    """Replace the steps that choose the answer by ``pick``, after the encoding's ``remove`` steps, before the
    normalizing ones (``strip``, ``int``)."""
    steps: list[dict[str, Any]] = spec.get("parse") or []
    removes = [s for s in steps if "remove" in s]
    tail = [s for s in steps if any(k in s for k in ("strip", "int", "lower", "upper"))]
    if spec["answer"]["reverse"] or spec["answer"]["pad"]:
        tail = [s for s in tail if "int" not in s]
    spec["parse"] = removes + pick + tail


def pick_options() -> list[list[dict[str, Any]]]:
    """Every answer-choosing step list ``parse_pick`` offers."""
    out: list[list[dict[str, Any]]] = [[{"number": n}] for n in ("first", "last", "new")]
    out += [[{"after": cue}, {"number": "first"}] for cue in CUES]
    out += [[{"first_line": True}], [{"regex": r"^\s*(\S+)"}]]
    return out


def op_parse_pick(spec: Spec, rng: random.Random) -> bool:
    """Another way to choose the answer in the completion (`pick_options`)."""
    current = [s for s in spec.get("parse") or [] if any(k in s for k in _NUMBER_STEPS)]
    options = [p for p in pick_options() if p != current]
    _set_pick(spec, rng.choice(options))
    return True


def op_prefix(spec: Spec, rng: random.Random) -> bool:
    """Another answer prefix of `PREFIXES` (the empty one removes it)."""
    current = spec.get("prefix", "")
    prefix = rng.choice([p for p in PREFIXES if p != current])
    if prefix:
        spec["prefix"] = prefix
    else:
        spec.pop("prefix", None)
    return True


def _numeric(spec: Spec) -> bool:
    """Whether the harness's own parse reads a number (a digit class in a regex, a number or int step)."""
    for step in spec.get("parse") or []:
        if "number" in step or "int" in step or ("regex" in step and "0-9" in str(step["regex"])):
            return True
    return False


BUNDLES: tuple[str, ...] = ("plain", "demos", "q-a", "reason", "qa-bare")
DEMOS = 3  # the demos bundle's few-shot k: a person's first move on a format problem is to show a few solved examples


def bundles(spec: Spec) -> list[Spec]:
    """The incumbent as each of `BUNDLES`, in that order: a framing with the stop and parse that go with it (see the
    module docstring), or (``demos``) its own framing with `DEMOS` demos when it has none. Framings are left out for
    chat mode or a template whose core is not found. ``spec`` is not changed."""
    template = spec.get("template")
    core = template_core(template) if isinstance(template, str) else None
    out = []
    for name in BUNDLES:
        b = copy.deepcopy(spec)
        if name == "demos":
            if b["fewshot"]["k"] == 0:
                b["fewshot"]["k"] = DEMOS
                out.append(b)
            continue
        if core is None:
            continue
        _reframe(b, core, name)
        decoding = b["decoding"]
        if name == "plain":
            decoding["stop"] = ["\n"]
            decoding["max_new_tokens"] = min(max(decoding["max_new_tokens"], 16), 32)
            if _numeric(b):
                _set_pick(b, [{"number": "new"}])
        out.append(b)
    return out


# name -> (operator, top-level fields it may touch, weight)
STRUCTURAL: dict[str, tuple[Any, frozenset[str], int]] = {
    "framing": (op_framing, frozenset({"template", "prefix", "parse", "decoding"}), 3),
    "stops": (op_stops, frozenset({"decoding"}), 2),
    "parse_pick": (op_parse_pick, frozenset({"parse"}), 2),
    "prefix": (op_prefix, frozenset({"prefix"}), 1),
}
