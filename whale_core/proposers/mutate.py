"""The `mutate` proposer: offline, seeded, generic edits of harness fields.

Each candidate applies 1..``max_ops`` random operators to a parent drawn from the top of the archive (mostly the
incumbent). The operators are generic — none knows gold answers or any particular suite:

- ``instruction``: replace / prepend / append / drop a sentence, with phrases from a bank of generic phrases,
  including phrases that describe an answer encoding ("Write the answer reversed."; with ``wording="paraphrase"``
  the same encodings in other words, "Give the result in mirror order.");
- ``answer_encoding``: change ``answer.reverse`` / ``pad`` / ``sep`` and rewrite the instruction's
  format-describing sentence to match (as an LLM would say how answers are written); a new separator also gets a
  ``remove`` parse step (so a digit regex still matches) and room in ``max_new_tokens``;
- ``fewshot``: ``k`` in 0..4, ``select`` random/first/similar;
- ``decoding``: temperature in {0, 0.2, 0.5, 0.8}, ``max_new_tokens`` doubled/halved within 4..128;
- ``inference``: samples in {1, 3, 5} with majority vote (raising samples under greedy decoding also sets a small
  temperature, since identical greedy samples cannot vote);
- ``parse``: add/remove ``strip``, ``first_line`` and ``int`` steps (``int`` never with reverse/pad: it would drop
  significant zeros);
- ``undo``: put one field back to the run's seed harness (``context.origin``): a decoding, few-shot or inference
  setting, the instruction, the template, a parse step the seed does not have (removed) or the whole parse pipeline,
  or the answer encoding (with the instruction sentence and parse steps that go with it). Only offered when the
  incumbent is not the seed; in prompt-weights mode only the instruction. A harness's score belongs to (harness,
  policy): under new weights, going back may be the best move.

With ``space="structural"`` the operators of `whale_core.proposers.structure` join them: the template's framing,
stop strings, which number the parse takes, an answer prefix.

Every emitted candidate passes `check_candidate` and has a sha distinct from the incumbent, from every archive
entry and from the other candidates. With ``restrict_to`` (prompt-weights mode) only operators whose fields lie
inside it are used. Deterministic given (``seed``, ``context.seed``, ``context.iteration``, incumbent and archive
shas): the RNG is seeded from a sha256 of those, never from Python's salted ``hash``.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
import time
from collections.abc import Callable
from typing import Any

import yaml

from whale_core.harness import Harness, HarnessError
from whale_core.proposers.base import Proposal, ProposalContext, check_candidate, empty_usage
from whale_core.proposers.structure import STRUCTURAL, bundles

__all__ = [
    "ENCODING_PHRASES",
    "GENERIC_PHRASES",
    "OPERATORS",
    "PARAPHRASED_ENCODING_PHRASES",
    "SPACES",
    "WORDINGS",
    "MutateProposer",
    "describe_encoding",
]

GENERIC_PHRASES: tuple[str, ...] = (
    "Give only the final answer.",
    "Answer with the result and nothing else.",
    "Be exact.",
    "Think carefully, then give the answer.",
    "Do not explain.",
    "Check the result before answering.",
    "Follow the format of the examples.",
    "Solve the problem.",
    "Compute the result.",
    "Use digits only.",
    "Keep the answer on one line.",
)
ENCODING_PHRASES: tuple[str, ...] = (
    "Write the answer reversed.",
    "Write the answer backwards, last digit first.",
    "Pad the answer with zeros.",
    "Write the answer digit by digit, separated by spaces.",
    "Write the answer in the usual order, most significant digit first.",
)
PHRASES = GENERIC_PHRASES + ENCODING_PHRASES
# The coupling check's wording (``search.mutate_wording: paraphrase``): the same encodings in words the shipped tiny
# model's warm-up never used (its reversed examples carry "Write the answer reversed (last digit first).", the very
# sentence `describe_encoding` writes), to measure how much of a result rests on that shared sentence.
PARAPHRASED_ENCODING_PHRASES: tuple[str, ...] = (
    "Give the result in mirror order.",
    "Start the result with its ones digit.",
    "Fill the result out with leading zeros.",
    "Put a space between the digits of the result.",
    "Give the result with the leading digit first.",
)
WORDINGS: tuple[str, ...] = ("default", "paraphrase")
SPACES: tuple[str, ...] = ("classic", "structural")

_FORMAT_SENTENCE = re.compile(
    r"\b(revers\w*|backwards|last digit first|most significant|usual order|pad\w*|zeros?|separat\w*|digit by digit"
    r"|mirror|ones digit|leading|between the digits)\b",
    re.IGNORECASE,
)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")
_SEP_WORDS = {" ": "spaces", ",": "commas", "_": "underscores", ".": "dots", "|": "bars", "/": "slashes"}

Spec = dict[str, Any]
Operator = Callable[[Spec, random.Random], bool]  # edits the spec in place; False when not applicable


def describe_encoding(reverse: bool, pad: int, sep: str, wording: str = "default") -> str | None:
    """One sentence describing an answer encoding, or None for the plain one (``wording``: see `WORDINGS`)."""
    para = wording == "paraphrase"
    parts = []
    if pad:
        parts.append(
            f"filled out with leading zeros to {pad} places" if para else f"left-padded with zeros to {pad} digits"
        )
    if reverse:
        parts.append("in mirror order, ones digit leading" if para else "reversed (last digit first)")
    if sep:
        word = _SEP_WORDS.get(sep, repr(sep))
        parts.append(f"with {word} between the digits" if para else f"with its digits separated by {word}")
    if not parts:
        return None
    body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Give the result {body}." if para else f"Write the answer {body}."


def _phrases(wording: str) -> tuple[str, ...]:
    return GENERIC_PHRASES + (PARAPHRASED_ENCODING_PHRASES if wording == "paraphrase" else ENCODING_PHRASES)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_SPLIT.split(text.strip()) if s]


def _join(sentences: list[str]) -> str:
    return " ".join(sentences)


# ---------------------------------------------------------------------------------------------- operators


def op_instruction(spec: Spec, rng: random.Random, wording: str = "default") -> bool:
    """Replace, prepend, append or drop one sentence of the instruction (phrases from the bank)."""
    sentences = _sentences(spec.get("instruction", ""))
    phrase = rng.choice([p for p in _phrases(wording) if p not in sentences])
    action = rng.choice(["replace", "prepend", "append", "drop"] if len(sentences) > 1 else ["replace", "append"])
    if action == "drop":
        sentences.pop(rng.randrange(len(sentences)))
    elif action == "replace" and sentences:
        sentences[rng.randrange(len(sentences))] = phrase
    elif action == "prepend":
        sentences.insert(0, phrase)
    else:
        sentences.append(phrase)
    spec["instruction"] = _join(sentences)
    return True


def op_answer_encoding(spec: Spec, rng: random.Random, wording: str = "default") -> bool:
    """Change reverse / pad / sep, say so in the instruction, and keep parse + decoding able to read it."""
    answer = spec["answer"]
    old_sep = answer["sep"]
    which = rng.choice(["reverse", "reverse", "pad", "sep"])
    if which == "reverse":
        answer["reverse"] = not answer["reverse"]
    elif which == "pad":
        answer["pad"] = rng.choice([p for p in (0, 4, 6, 8) if p != answer["pad"]])
    else:
        answer["sep"] = rng.choice([s for s in ("", " ", ",") if s != old_sep])
    _follow_encoding(spec, old_sep, wording)
    return True


def _follow_encoding(spec: Spec, old_sep: str, wording: str) -> None:
    """After ``spec["answer"]`` changed (its separator was ``old_sep``): the instruction, parse steps and
    ``max_new_tokens`` that go with the new encoding."""
    answer = spec["answer"]
    # the instruction describes the new encoding: drop sentences that described an encoding, add the new one
    kept = [s for s in _sentences(spec.get("instruction", "")) if not _FORMAT_SENTENCE.search(s)]
    described = describe_encoding(answer["reverse"], answer["pad"], answer["sep"], wording)
    spec["instruction"] = _join([*kept, described] if described else kept)
    # parse: a separator is removed before the other steps see the text; int would lose significant zeros
    steps = [s for s in spec["parse"] if not (old_sep and s == {"remove": old_sep})]
    if answer["sep"]:
        steps.insert(0, {"remove": answer["sep"]})
    if answer["reverse"] or answer["pad"]:
        steps = [s for s in steps if "int" not in s]
    spec["parse"] = steps
    # decoding: room for the longer written answer
    decoding = spec["decoding"]
    if answer["sep"] and not old_sep:
        decoding["max_new_tokens"] = min(128, decoding["max_new_tokens"] * 2)
    need = answer["pad"] * (2 if answer["sep"] else 1) + 2
    decoding["max_new_tokens"] = max(decoding["max_new_tokens"], min(128, need))


def op_fewshot(spec: Spec, rng: random.Random) -> bool:
    """Another number of demos (0..4), or another selection rule."""
    fewshot = spec["fewshot"]
    if fewshot["k"] > 0 and rng.random() < 0.3:
        fewshot["select"] = rng.choice([s for s in ("random", "first", "similar") if s != fewshot["select"]])
    else:
        fewshot["k"] = rng.choice([k for k in range(5) if k != fewshot["k"]])
    return True


def op_decoding(spec: Spec, rng: random.Random) -> bool:
    """Another temperature, or max_new_tokens doubled/halved within 4..128."""
    decoding = spec["decoding"]
    if rng.random() < 0.5:
        decoding["temperature"] = rng.choice([t for t in (0.0, 0.2, 0.5, 0.8) if t != decoding["temperature"]])
    else:
        current = decoding["max_new_tokens"]
        options = [v for v in (current * 2, current // 2) if 4 <= v <= 128 and v != current]
        if not options:
            return False
        decoding["max_new_tokens"] = rng.choice(options)
    return True


def op_inference(spec: Spec, rng: random.Random) -> bool:
    """Samples in {1, 3, 5} with majority vote; sampling needs a temperature to make the votes differ."""
    inference, decoding = spec["inference"], spec["decoding"]
    inference["samples"] = rng.choice([s for s in (1, 3, 5) if s != inference["samples"]])
    if inference["samples"] > 1:
        inference["aggregate"] = "majority"
        if decoding["temperature"] == 0.0:
            decoding["temperature"] = rng.choice([0.3, 0.5])
    return True


def op_parse(spec: Spec, rng: random.Random) -> bool:
    """Add or remove a ``strip`` / ``first_line`` / ``int`` normalization step."""
    steps: list[dict[str, Any]] = spec["parse"]
    choices = [{"strip": True}, {"first_line": True}]
    if not (spec["answer"]["reverse"] or spec["answer"]["pad"]):
        choices.append({"int": True})
    step = rng.choice(choices)
    if step in steps:
        steps.remove(step)
    elif "int" in step:
        steps.append(step)  # normalize last
    else:
        steps.insert(0, step)  # clean up first
    return True


def _undo_moves(spec: Spec, origin: Spec, restrict: frozenset[str] | None) -> list[tuple[str, Any]]:
    """The single steps that bring ``spec`` one field closer to ``origin``, in a fixed order."""
    moves: list[tuple[str, Any]] = []
    framing = ("template", "messages")
    for top in sorted(set(spec) | set(origin)):
        if top in ("whale_harness", "name") or spec.get(top) == origin.get(top):
            continue
        if restrict is not None and top not in restrict:
            continue
        mine, theirs = spec.get(top), origin.get(top)
        if top in framing:
            moves.append(("framing", None))
        elif top == "answer":
            moves.append(("answer", None))
        elif isinstance(mine, dict) and isinstance(theirs, dict):
            moves += [(top, k) for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        elif top == "parse" and isinstance(mine, list) and isinstance(theirs, list):
            moves += [("parse-drop", i) for i, step in enumerate(mine) if step not in theirs]
            moves.append(("parse", None))
        else:
            moves.append((top, None))
    return list(dict.fromkeys(moves))


def op_undo(spec: Spec, rng: random.Random, origin: Spec, restrict: frozenset[str] | None, wording: str) -> bool:
    """Put one field of ``spec`` back to ``origin``'s value (see `_undo_moves`); False when they agree."""
    moves = _undo_moves(spec, origin, restrict)
    if not moves:
        return False
    what, key = rng.choice(moves)
    if what == "framing":
        for f in ("template", "messages"):
            spec.pop(f, None)
            if f in origin:
                spec[f] = copy.deepcopy(origin[f])
    elif what == "answer":
        old_sep = spec.get("answer", {}).get("sep", "")
        spec["answer"] = copy.deepcopy(origin["answer"])
        _follow_encoding(spec, old_sep, wording)
    elif what == "parse-drop":
        spec["parse"].pop(int(key))
    elif key is None:
        if what in origin:
            spec[what] = copy.deepcopy(origin[what])
        else:
            spec.pop(what, None)
    elif key in origin[what]:
        spec[what][key] = copy.deepcopy(origin[what][key])
    else:
        spec[what].pop(key, None)
    return True


# name -> (operator, top-level fields it may touch)
OPERATORS: dict[str, tuple[Operator, frozenset[str]]] = {
    "instruction": (op_instruction, frozenset({"instruction"})),
    "answer_encoding": (op_answer_encoding, frozenset({"answer", "instruction", "parse", "decoding"})),
    "fewshot": (op_fewshot, frozenset({"fewshot"})),
    "decoding": (op_decoding, frozenset({"decoding"})),
    "inference": (op_inference, frozenset({"inference", "decoding"})),
    "parse": (op_parse, frozenset({"parse"})),
}
# relative weights: the instruction and the answer encoding are where the headroom usually is
_WEIGHTS = {"instruction": 3, "answer_encoding": 3, "fewshot": 2, "decoding": 1, "inference": 1, "parse": 1}
UNDO_WEIGHT = 2  # ``undo`` (`op_undo`): offered only when the incumbent is not the run's seed harness


class MutateProposer:
    """Offline proposer: seeded random generic edits (see the module docstring). ``max_ops`` ≥ 1 operators per
    candidate at most; ``max_attempts_per_candidate`` bounds the work when the space near the parents is crowded;
    ``wording`` words the encoding sentences (`WORDINGS`: ``paraphrase`` is the coupling check)."""

    name = "mutate"

    def __init__(
        self,
        seed: int = 0,
        max_ops: int = 2,
        max_attempts_per_candidate: int = 50,
        wording: str = "default",
        space: str = "classic",
    ) -> None:
        if max_ops < 1:
            raise ValueError(f"MutateProposer: max_ops must be >= 1 (got {max_ops})")
        if wording not in WORDINGS:
            raise ValueError(f"MutateProposer: wording must be one of {', '.join(WORDINGS)} (got {wording!r})")
        if space not in SPACES:
            raise ValueError(f"MutateProposer: space must be one of {', '.join(SPACES)} (got {space!r})")
        self.seed = seed
        self.max_ops = max_ops
        self.max_attempts_per_candidate = max_attempts_per_candidate
        self.wording = wording
        self.space = space
        self.operators = {name: (op, fields) for name, (op, fields) in OPERATORS.items()}
        self.weights = dict(_WEIGHTS)
        if space == "structural":
            for name, (op, fields, weight) in STRUCTURAL.items():
                self.operators[name], self.weights[name] = (op, fields), weight

    def __repr__(self) -> str:
        extra = f", wording={self.wording!r}" if self.wording != "default" else ""
        extra += f", space={self.space!r}" if self.space != "classic" else ""
        return f"MutateProposer(seed={self.seed}, max_ops={self.max_ops}{extra})"

    def _apply(self, name: str, spec: Spec, rng: random.Random, context: ProposalContext | None = None) -> bool:
        if name == "undo":
            assert context is not None and context.origin is not None
            origin = yaml.safe_load(context.origin)
            return op_undo(spec, rng, origin, context.restrict_to, self.wording)
        op = self.operators[name][0]
        if name in ("instruction", "answer_encoding"):  # the operators that write encoding sentences
            return bool(op(spec, rng, self.wording))  # type: ignore[call-arg]
        return op(spec, rng)

    def _rng(self, context: ProposalContext) -> random.Random:
        key = "|".join(
            [str(self.seed), str(context.seed), str(context.iteration), context.incumbent.sha]
            + [entry.sha for entry in context.archive]
        )
        return random.Random(hashlib.sha256(key.encode("utf-8")).hexdigest())

    def _parents(self, context: ProposalContext, incumbent: Harness) -> list[Harness]:
        """The incumbent, then up to three best-scored valid archive entries that still parse."""
        scored = [
            e
            for e in context.archive
            if e.score is not None and e.status != "rejected" and e.sha != context.incumbent.sha
        ]
        scored.sort(key=lambda e: -(e.score or 0.0))
        parents = [incumbent]
        for entry in scored:
            try:
                parents.append(Harness.from_text(entry.text, parent=entry.parent))
            except HarnessError:
                continue
            if len(parents) == 4:
                break
        return parents

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        """Up to ``k`` valid, distinct candidates (fewer only if the neighbourhood is exhausted); never raises for a
        bad candidate — invalid ones are retried, not returned."""
        start = time.perf_counter()
        rng = self._rng(context)
        incumbent = Harness.from_text(context.incumbent.text, parent=context.incumbent.parent)
        parents = self._parents(context, incumbent)
        allowed = [
            name
            for name, (_, fields) in self.operators.items()
            if context.restrict_to is None or fields <= context.restrict_to
        ]
        weights = [self.weights[n] for n in allowed]
        if context.origin is not None:
            allowed, weights = [*allowed, "undo"], [*weights, UNDO_WEIGHT]
        if not allowed or k <= 0:
            return []
        seen = {context.incumbent.sha, incumbent.sha} | {entry.sha for entry in context.archive}
        out: list[Proposal] = []
        if self.space == "structural" and (context.restrict_to is None or "template" in context.restrict_to):
            for spec in bundles(yaml.safe_load(incumbent.text)):  # coverage first: up to half of k, unseen ones
                if len(out) >= max(1, k // 2):
                    break
                text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
                proposal = check_candidate(
                    text, incumbent, context.restrict_to, proposer=self.name, parent=incumbent.sha
                )
                if proposal.harness is not None and proposal.harness.sha not in seen:
                    seen.add(proposal.harness.sha)
                    out.append(proposal)
        for _ in range(k * self.max_attempts_per_candidate):
            if len(out) == k:
                break
            parent = parents[0] if len(parents) == 1 or rng.random() < 0.7 else rng.choice(parents[1:])
            spec = yaml.safe_load(parent.text)
            n_ops = rng.randint(1, self.max_ops)
            names = rng.choices(allowed, weights=weights, k=n_ops)
            if not any([self._apply(name, spec, rng, context) for name in names]):
                continue
            text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
            proposal = check_candidate(text, incumbent, context.restrict_to, proposer=self.name, parent=parent.sha)
            if proposal.harness is None or proposal.harness.sha in seen:
                continue
            seen.add(proposal.harness.sha)
            out.append(proposal)
        latency = time.perf_counter() - start
        for proposal in out:
            proposal.usage.update(empty_usage() | {"latency_s": latency / len(out)})
        return out
