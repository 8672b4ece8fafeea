"""The prompt an LLM proposer sends: the proposal context rendered as chat messages within a token budget.

What is always kept: the instructions, the suite description, the harness format reference and the incumbent (text,
score). What is trimmed to fit ``context_tokens``: archive entries (lowest-scored scored entries and the oldest
rejections go first) and failing traces (each trace's fields are clipped first — the prompt keeps its tail, where
the problem is — then the longest traces are dropped first).

Simplified: tokens are estimated as ``ceil(chars / 3)`` rather than counted with the provider's tokenizer. That is
deliberately conservative (English prose averages ~4 chars/token, digit-heavy traces fewer) and it needs no
tokenizer download and no litellm import, so the prompt is deterministic and cheap to build and to test.
"""

from __future__ import annotations

import difflib
import math

from whale_core.proposers.base import ArchiveEntry, FailingTrace, ProposalContext

__all__ = ["CHARS_PER_TOKEN", "build_messages", "clip", "estimate_tokens"]

CHARS_PER_TOKEN = 3.0
# Per-field caps for one failing trace (characters); a trace is evidence, not a transcript.
TRACE_CAPS = {"prompt": 1200, "completion": 400, "parsed": 120, "gold": 120, "error": 300}
ENTRY_TEXT_CAP = 4000
REASON_CAP = 400

SYSTEM_PROMPT = (
    "You are an expert prompt and inference engineer improving the harness of a small language model: the text "
    "and policy around the model (instruction, input template, few-shot demos, answer encoding, parse pipeline, "
    "decoding, sampling and voting). The model's weights are fixed while you work. A candidate replaces the "
    "incumbent only if it scores clearly higher on held-out problems. Propose concrete, testable changes; learn "
    "from the scores of earlier candidates and from the reasons earlier candidates were rejected."
)


def estimate_tokens(text: str) -> int:
    """Conservative token estimate: ``ceil(len(text) / CHARS_PER_TOKEN)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def clip(text: str, limit: int, keep: str = "head") -> str:
    """Cut ``text`` to about ``limit`` chars, saying how much was cut; ``keep`` = ``head`` | ``tail`` | ``both``."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    marker = f"[... {cut} chars cut ...]"
    if keep == "tail":
        return marker + text[-limit:]
    if keep == "both":
        head = limit // 3
        return text[:head] + marker + text[len(text) - (limit - head) :]
    return text[:limit] + marker


def _score(entry: ArchiveEntry) -> str:
    return "not scored" if entry.score is None else f"{entry.score:.4f} on {entry.n} problems"


def _entry_block(entry: ArchiveEntry, incumbent_text: str) -> str:
    """An archive entry: header, then its text as a diff against the incumbent when that is shorter."""
    lines = [f"### {entry.sha[:12]} — status: {entry.status}; score: {_score(entry)}"]
    if entry.parent:
        lines.append(f"parent: {entry.parent[:12]}")
    if entry.prompt_tokens is not None:
        lines.append(f"mean prompt tokens: {entry.prompt_tokens:.0f}")
    if entry.reason:
        lines.append(f"rejection reason: {clip(entry.reason, REASON_CAP)}")
    text = entry.text.rstrip("\n")
    diff = "\n".join(
        line.rstrip("\n")
        for line in difflib.unified_diff(
            incumbent_text.rstrip("\n").splitlines(), text.splitlines(), "incumbent", entry.sha[:12], n=2, lineterm=""
        )
    )
    if diff and len(diff) < len(text):
        lines.append("changes against the incumbent:\n```diff\n" + clip(diff, ENTRY_TEXT_CAP) + "\n```")
    else:
        lines.append("```yaml\n" + clip(text, ENTRY_TEXT_CAP) + "\n```")
    return "\n".join(lines)


def _trace_block(trace: FailingTrace) -> str:
    parsed = "(parse failed)" if trace.parsed is None else repr(clip(trace.parsed, TRACE_CAPS["parsed"]))
    lines = [
        f"### problem {trace.problem_id}",
        "prompt (as the model saw it):\n```\n" + clip(trace.prompt, TRACE_CAPS["prompt"], keep="tail") + "\n```",
        "completion:\n```\n" + clip(trace.completion, TRACE_CAPS["completion"]) + "\n```",
        f"parsed answer: {parsed}; gold answer: {clip(trace.gold, TRACE_CAPS['gold'])!r}",
    ]
    if trace.error:
        lines.append(f"parse error: {clip(trace.error, TRACE_CAPS['error'])}")
    return "\n".join(lines)


def _archive_priority(context: ProposalContext) -> list[int]:
    """Indices of archive entries in the order they are kept: scored entries best first, then the rest newest
    first (the archive list is taken as oldest → newest). The incumbent is not repeated."""
    scored: list[int] = []
    other: list[int] = []
    for index, entry in enumerate(context.archive):
        if entry.sha == context.incumbent.sha:
            continue
        (scored if entry.score is not None and entry.status != "rejected" else other).append(index)
    scored.sort(key=lambda i: (-(context.archive[i].score or 0.0), -i))
    other.sort(key=lambda i: -i)
    return scored + other


def _restriction_note(restrict_to: frozenset[str] | None) -> str:
    if restrict_to is None:
        return "You may change any field."
    fields = ", ".join(repr(f) for f in sorted(restrict_to))
    return (
        f"RESTRICTION: only {fields} may differ from the incumbent. Copy every other field verbatim (the name "
        "included); a candidate that changes anything else is rejected."
    )


def _task(k: int, restrict_to: frozenset[str] | None) -> str:
    return (
        f"## Your task\nPropose {k} new candidate harness(es) likely to score higher than the incumbent. "
        f"{_restriction_note(restrict_to)} Do not repeat the incumbent or any archive entry. Prefer candidates that "
        "differ from each other (they are evaluated side by side). Before each candidate write one sentence with "
        "its hypothesis, then the complete harness as one YAML document in its own fenced block:\n"
        "```yaml\nwhale_harness: 1\n...\n```"
    )


def build_messages(context: ProposalContext, k: int, context_tokens: int) -> list[dict[str, str]]:
    """Chat messages (system + user) asking for ``k`` candidates, sized to about ``context_tokens`` prompt tokens.

    The fixed parts are always included, even if they alone exceed the budget; archive entries and traces fill what
    is left (see the module docstring for the trimming order). Sections that lost items say how many were left out.
    """
    inc = context.incumbent
    head = [
        "## Task suite\n" + context.suite_description.strip(),
        "## Harness format\n" + context.format_reference.strip(),
        f"## Incumbent harness ({inc.sha[:12]}; score: {_score(inc)})\n```yaml\n{inc.text.rstrip()}\n```",
    ]
    task = _task(k, context.restrict_to)
    fixed = estimate_tokens(SYSTEM_PROMPT) + estimate_tokens("\n\n".join([*head, task])) + 64  # section headers
    remaining = max(0, context_tokens - fixed)

    entries = {i: _entry_block(context.archive[i], inc.text) for i in _archive_priority(context)}
    traces = {i: _trace_block(t) for i, t in enumerate(context.failing_traces)}
    trace_order = sorted(traces, key=lambda i: (len(traces[i]), i))  # longest dropped first

    kept_traces: set[int] = set()
    used = 0

    def take_traces(limit: int) -> None:
        nonlocal used
        for i in trace_order:
            cost = estimate_tokens(traces[i]) + 1
            if i not in kept_traces and used + cost <= limit:
                kept_traces.add(i)
                used += cost

    take_traces(remaining // 2)  # traces get at least half of what is left when they need it
    kept_entries: list[int] = []
    for i in entries:  # priority order; stop at the first that does not fit so that order means something
        cost = estimate_tokens(entries[i]) + 1
        if used + cost > remaining:
            break
        kept_entries.append(i)
        used += cost
    take_traces(remaining)

    body = list(head)
    if context.archive:
        dropped = len(entries) - len(kept_entries)
        note = f" ({dropped} more left out for length)" if dropped else ""
        blocks = [entries[i] for i in sorted(kept_entries)]
        body.append(
            "## Archive: earlier candidates, scored under the current policy, and recent rejections"
            + note
            + "\n"
            + ("\n\n".join(blocks) if blocks else "(none shown)")
        )
    if context.failing_traces:
        dropped = len(traces) - len(kept_traces)
        note = f" ({dropped} more left out for length)" if dropped else ""
        blocks = [traces[i] for i in sorted(kept_traces)]
        body.append(
            "## Failing traces of the incumbent on validation problems"
            + note
            + "\n"
            + ("\n\n".join(blocks) if blocks else "(none shown)")
        )
    body.append(task)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(body)}]
