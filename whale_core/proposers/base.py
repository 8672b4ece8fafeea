"""The proposer protocol: what a harness proposer receives, what it returns, and the one validity gate.

A proposer turns the state of the harness search (incumbent, archive, failing traces) into K candidate harness
texts. Every candidate goes through `check_candidate` (parse + validate, "is it a change?", "does it respect the
mode's restriction?") so that all proposers reject the same things with the same reasons, and the harness leg stores
the reason with each rejected candidate.

Simplified on purpose: the restriction (``restrict_to``) is a set of top-level harness fields; a candidate that
changes anything outside it — its ``name`` included — is rejected, never silently repaired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import yaml

from whale_core.dotted import flatten
from whale_core.harness import Harness, HarnessError

__all__ = [
    "FORMAT_REFERENCE",
    "PROMPT_ONLY",
    "ArchiveEntry",
    "FailingTrace",
    "Proposal",
    "ProposalContext",
    "Proposer",
    "ProposerUnavailable",
    "changed_fields",
    "check_candidate",
    "empty_usage",
]


FORMAT_REFERENCE = """\
A harness is one YAML mapping (at most 16 KiB). Unknown keys are errors. Fields, in canonical order:

whale_harness: 1                 # required, always 1
name: my-harness                 # [A-Za-z0-9._-], at most 80 chars
instruction: "..."               # free text (<= 2000 chars); templates may use it as {{ instruction }}
template: "{{ instruction }}\\n{{ a }}+{{ b }}="   # text mode: a Jinja2 template over the problem's fields
messages:                        # OR chat mode (exactly one of template / messages): roles system (first only),
  - {role: system, content: "{{ instruction }}"}    #   user, assistant; the last message is a user message;
  - {role: user, content: "{{ a }}+{{ b }}="}       #   each content is a Jinja2 template
prefix: " The answer is"         # optional (<= 200 chars): literal text after the rendered prompt, continued by
                                 #   the model (not added to demos)
fewshot: {k: 2, select: random, separator: "\\n"}  # k demos (0-16) from the train split; select: random|first|similar
answer: {reverse: false, pad: 0, sep: ""}        # how answers are written in demos and by the model:
                                 #   pad: left-pad with zeros to this many characters (0 = none, <= 32);
                                 #   reverse: write the characters last-first; sep: inserted between characters
                                 #   (<= 3 chars, no letters/digits/'-'). A leading '-' sign stays in front.
                                 #   e.g. 42 with {pad: 4, reverse: true, sep: ","} is written 2,4,0,0
parse:                           # steps turning the completion into the written answer, in order:
  - {regex: '^\\s*(-?[0-9]+)'}     #   regex: first capture group (else the whole match); must be simple and fast
  - {strip: true}                #   strip: true = whitespace, or a string of characters to strip
                                 #   remove: 'x' (delete every occurrence), reverse, lower, upper, first_line,
                                 #   last_line, int (normalize an integer; loses leading zeros, so not with
                                 #   reverse or pad): each written as {op: true}
  - {after: 'answer is'}         #   after: the text after the last occurrence of a cue (<= 32 chars)
  - {number: new}                #   number: first | last | new (the first number not written in the problem)
decoding: {temperature: 0.0, top_p: 1.0, max_new_tokens: 32, stop: ["\\n"]}  # temperature 0-2 (0 = greedy);
                                 #   max_new_tokens 1-512; up to 4 stop strings (the completion is cut there)
inference: {samples: 1, aggregate: majority}    # samples 1-32 completions per problem, combined by majority vote
                                 #   or first; samples > 1 only helps with temperature > 0

How a text-mode prompt is built: each demo is the rendered template followed by its answer written in the answer
format; demos are joined with fewshot.separator, then the separator, then the rendered template of the problem; the
model continues from there. After generation: cut at the first stop string, run the parse steps, strip, then undo
the answer format (remove sep, un-reverse, drop padding zeros) to get the answer that is scored.

Templates are sandboxed: no function or method calls, no names starting with '_', no import/include/macro; the
filters upper, lower, trim, replace, join, length, first, last, reverse, int, string, default and a few more are
allowed. Everything is data: no code runs from a harness.
"""


class ProposerUnavailable(RuntimeError):
    """A systemic proposer fault (no API key configured, provider unreachable after retries, ...).

    The message names the proposer/model and the cause; it never contains a credential. The harness leg records it
    and goes on without this proposer's candidates.
    """


@dataclass(frozen=True)
class ArchiveEntry:
    """One harness the search has seen: its text, score under the current policy (None if never scored), the number
    of problems behind the score, its status (e.g. ``incumbent``, ``accepted``, ``evaluated``, ``rejected``), the
    rejection reason if any, its parent sha, and its mean prompt length in tokens (None if unknown)."""

    sha: str
    text: str
    score: float | None
    n: int
    status: str
    reason: str | None
    parent: str | None
    prompt_tokens: float | None


@dataclass(frozen=True)
class FailingTrace:
    """One validation problem the incumbent got wrong: the rendered prompt, the completion, the parsed answer (None
    when parsing failed), the gold answer and the parse error if any."""

    problem_id: str
    prompt: str
    completion: str
    parsed: str | None
    gold: str
    error: str | None


@dataclass(frozen=True)
class ProposalContext:
    """Everything a proposer may look at.

    ``archive`` holds the top-N harnesses by score under the *current* policy plus recent rejections with their
    reasons. ``restrict_to`` limits which top-level fields may change (``{"instruction"}`` in prompt-weights mode);
    None means any field may change. ``format_reference`` is the harness format doc shown to LLM proposers.
    ``origin`` is the run's seed harness text (None when the incumbent is the seed). ``proposer_spent`` is what the
    proposer spent in the run's earlier legs (``prompt_tokens``, ``completion_tokens``, ``cost_usd``, ...): where
    ``search.proposer_budget`` starts counting from.
    """

    suite_description: str
    format_reference: str
    incumbent: ArchiveEntry
    archive: list[ArchiveEntry]
    failing_traces: list[FailingTrace]
    restrict_to: frozenset[str] | None = None
    seed: int = 0
    iteration: int = 0
    origin: str | None = None  # the run's seed harness text, when it is not the incumbent (undo moves go back to it)
    proposer_spent: dict[str, float] = field(default_factory=dict)  # the run's earlier legs' proposer usage totals


@dataclass(frozen=True)
class Proposal:
    """One candidate: ``status == "valid"`` carries the parsed `Harness` and its canonical ``text``; ``"rejected"``
    carries the raw text (None if there was none) and the ``reason``. ``usage`` has ``prompt_tokens``,
    ``completion_tokens``, ``cost_usd`` and ``latency_s`` (a call's usage is split evenly over its proposals, so
    summing over proposals gives the totals)."""

    text: str | None
    harness: Harness | None
    status: Literal["valid", "rejected"]
    reason: str | None
    proposer: str
    usage: dict[str, float] = field(default_factory=lambda: empty_usage())
    parent: str | None = None  # the harness it was derived from, when the proposer says (else the incumbent)

    @property
    def sha(self) -> str | None:
        """The candidate's sha when valid, else None."""
        return self.harness.sha if self.harness is not None else None


@runtime_checkable
class Proposer(Protocol):
    """A harness proposer.

    Contract:
    - ``propose(context, k)`` returns at most ``k`` valid proposals, plus any number of rejected ones (each with its
      reason). Fewer than ``k`` valid proposals is fine.
    - Valid proposals pass `check_candidate` against the incumbent and ``context.restrict_to``.
    - It never raises for a bad candidate (the candidate comes back rejected). It raises `ProposerUnavailable` only
      for systemic faults (no credentials, provider unreachable after retries); nothing it raises or returns
      contains a credential.
    """

    name: str

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]: ...


def empty_usage() -> dict[str, float]:
    """A usage dict with all counters at zero."""
    return {"prompt_tokens": 0.0, "completion_tokens": 0.0, "cost_usd": 0.0, "latency_s": 0.0}


def changed_fields(old: Harness, new: Harness) -> list[str]:
    """Dotted paths of the fields whose values differ between two harnesses (sorted)."""
    a = flatten(yaml.safe_load(old.text))  # lists (parse steps, messages, stop strings) compare as wholes
    b = flatten(yaml.safe_load(new.text))
    return sorted(key for key in set(a) | set(b) if a.get(key, _MISSING) != b.get(key, _MISSING))


_MISSING = object()
PROMPT_ONLY: frozenset[str] = frozenset({"instruction"})  # what prompt-weights mode lets a candidate change


def check_candidate(
    text: str,
    incumbent: Harness,
    restrict_to: frozenset[str] | None,
    proposer: str = "",
    parent: str | None = None,
) -> Proposal:
    """Parse and validate one candidate text; never raises.

    Rejected (with the reason) when: the text is not a valid harness (the `HarnessError` message, which names the
    field); it is identical to the incumbent (``"no change"``); or it changes a field outside ``restrict_to``
    (``"prompt-weights mode: only 'instruction' may change; changed: answer.reverse"``). A valid candidate records
    ``parent`` (default: the incumbent's sha) as its parent.
    """
    parent_sha = parent if parent is not None else incumbent.sha
    try:
        harness = Harness.from_text(text, parent=parent_sha)
    except HarnessError as exc:  # the raw text is kept; a lone surrogate (not storable as UTF-8) as \udcxx
        raw = text.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(text, str) else text
        return Proposal(text=raw, harness=None, status="rejected", reason=str(exc), proposer=proposer)
    except Exception as exc:  # a harness bug must not crash a proposer: record it as the reason
        reason = f"harness could not be parsed: {type(exc).__name__}: {exc}"
        return Proposal(text=text, harness=None, status="rejected", reason=reason, proposer=proposer)
    if harness.sha == incumbent.sha:
        return Proposal(text=text, harness=None, status="rejected", reason="no change", proposer=proposer)
    if restrict_to is not None:
        changed = changed_fields(incumbent, harness)
        outside = [path for path in changed if path.split(".")[0] not in restrict_to]
        if outside:
            allowed = ", ".join(repr(f) for f in sorted(restrict_to))
            mode = "prompt-weights mode" if restrict_to == PROMPT_ONLY else "restricted mode"
            reason = f"{mode}: only {allowed} may change; changed: {', '.join(outside)}"
            return Proposal(text=text, harness=None, status="rejected", reason=reason, proposer=proposer)
    return Proposal(text=harness.text, harness=harness, status="valid", reason=None, proposer=proposer)
