"""The prompt an LLM proposer sends: the proposal context rendered as chat messages within a token budget.

What is always kept: the instructions, the suite description, the harness format reference and the incumbent (text,
score). What is trimmed to fit ``context_tokens``: archive entries (lowest-scored scored entries and the oldest
rejections go first) and failing traces (each trace's fields are clipped first — the prompt keeps its tail, where
the problem is — then the longest traces are dropped first).

`build_compact_messages` is the variant for small local models (`whale_core.proposers.served`): one candidate per
request, a directed edit of one field of the incumbent, a one-line-per-field format note instead of the full
reference, and trimming measured with a caller-supplied token counter (the model's own tokenizer).

Simplified: tokens are estimated as ``ceil(chars / 3)`` rather than counted with the provider's tokenizer. That is
deliberately conservative (English prose averages ~4 chars/token, digit-heavy traces fewer) and it needs no
tokenizer download and no litellm import, so the prompt is deterministic and cheap to build and to test.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable

from whale_core.proposers.base import ArchiveEntry, FailingTrace, ProposalContext
from whale_core.seeds import rotation_start

__all__ = [
    "CHARS_PER_TOKEN",
    "FIELD_NOTES",
    "build_compact_messages",
    "build_component_messages",
    "build_messages",
    "clip",
    "compact_focus",
    "estimate_tokens",
]

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


# ------------------------------------------------------------------------------------- compact, for small models

COMPACT_SYSTEM_PROMPT = "You edit YAML configuration files. You reply with one YAML document in a ```yaml block."

# What each top-level field means and the values it takes, one line each: a small model gets the field it is asked
# to change, the values that field takes, and the incumbent as a complete example to copy.
FIELD_NOTES = {
    "instruction": "free text shown to the model; templates use it as {{ instruction }}",
    "template": "a Jinja2 text template over the problem's fields; the model continues after it",
    "fewshot": "k: number of solved examples put before the problem (0 to 16); select: random, first or similar; "
    "separator: text between examples",
    "answer": "how answers are written: reverse: true/false (digits last-first); pad: left-pad with zeros to this "
    "many characters (0 = none); sep: a separator between characters such as ' ' or ','",
    "parse": "a list of steps turning the model's text into the answer: {regex: '...'} (first capture group), "
    "{strip: true}, {first_line: true}, {last_line: true}, {int: true}, {after: 'answer is'} (the text after a cue), "
    "{number: first|last|new} (new: the first number not written in the problem)",
    "prefix": "text put after the prompt that the model continues from, e.g. ' The answer is' (empty = none)",
    "decoding": "temperature: 0 to 2 (0 = greedy); top_p; max_new_tokens: 1 to 512; stop: up to 4 stop strings",
    "inference": "samples: 1 to 32 completions per problem; aggregate: majority or first (samples > 1 needs "
    "temperature > 0)",
}


def compact_focus(restrict_to: frozenset[str] | None, seed: int, iteration: int, index: int) -> str:
    """The field the ``index``-th compact request asks to change: a seeded rotation over the fields that may
    change (``instruction`` only in prompt-weights mode)."""
    fields = [f for f in FIELD_NOTES if restrict_to is None or f in restrict_to] or ["instruction"]
    start = rotation_start(seed, iteration, len(fields))
    return fields[(start + index) % len(fields)]


def _compact_archive_line(entry: ArchiveEntry) -> str:
    name = entry.text.split("name:", 1)[-1].split("\n", 1)[0].strip()[:40] if "name:" in entry.text else "?"
    if entry.status == "rejected" or entry.score is None:
        return f"- rejected ({name}): {clip(entry.reason or 'no reason recorded', 160)}"
    return f"- {name}: score {entry.score:.3f}"


def _compact_trace(trace: FailingTrace) -> str:
    parsed = "nothing" if trace.parsed is None else repr(clip(trace.parsed, 40))
    return (
        f"- prompt ends: {clip(trace.prompt, 160, keep='tail')!r}; model wrote {clip(trace.completion, 80)!r}; "
        f"parsed {parsed}; correct {clip(trace.gold, 40)!r}"
    )


def _fit(title: str, lines: list[str], share: int, count: Callable[[str], int]) -> tuple[list[str], int]:
    """The leading ``lines`` that fit ``share`` tokens with their section ``title`` (a line and its newline each),
    and the tokens they use; the first line that does not fit ends the section, so order keeps its meaning."""
    kept: list[str] = []
    used = count(title)
    for line in lines:
        cost = count(line) + 1
        if used + cost > share:
            break
        kept.append(line)
        used += cost
    return kept, used


def build_compact_messages(
    context: ProposalContext, focus: str, context_tokens: int, count: Callable[[str], int] = estimate_tokens
) -> list[dict[str, str]]:
    """Chat messages asking a *small* model for one candidate that changes the ``focus`` field of the incumbent.

    For models of ~100 M–1 B parameters with a few thousand positions, which copy examples and lose a long format
    reference: a one-line system prompt, the suite description, one line per field (`FIELD_NOTES`), the incumbent
    as the complete example to copy, then as many archive lines (best scored first, then the newest rejections with
    their reasons) and failing traces as fit ``context_tokens`` as ``count`` measures them (the model's own tokenizer
    when the caller has it), and a directed task. The fixed parts are always kept.
    """
    inc = context.incumbent
    score = "not scored" if inc.score is None else f"score {inc.score:.3f} on {inc.n} problems"
    fields = "\n".join(f"- {name}: {note}" for name, note in FIELD_NOTES.items())
    head = (
        f"Task: {context.suite_description.strip()}\n\n"
        "A harness is a YAML file that tells a small language model how to solve the task. Its fields:\n"
        f"{fields}\n\nThe current harness ({score}):\n```yaml\n{inc.text.rstrip()}\n```"
    )
    note = FIELD_NOTES.get(focus, "")
    task = (
        f"Write a better harness: copy the current harness and change its `{focus}` field ({note}). "
        + ("Keep every other field exactly as it is. " if context.restrict_to is not None else "")
        + "Reply with the complete new harness in one ```yaml block."
    )
    budget = context_tokens - count(COMPACT_SYSTEM_PROMPT) - count(head) - count(task) - 32
    archive = [context.archive[i] for i in _archive_priority(context)]
    archive_lines: list[str] = []
    trace_lines: list[str] = []
    sections = [
        (archive_lines, [_compact_archive_line(e) for e in archive], "Earlier candidates:"),
        (trace_lines, [_compact_trace(t) for t in context.failing_traces], "Problems the current harness got wrong:"),
    ]
    for kept, lines, title in sections:
        fitted, used = _fit(title, lines, budget // 2 if kept is archive_lines else budget, count)
        kept.extend(fitted)
        if kept:
            budget -= used
    parts = [head]
    for kept, _, title in sections:
        if kept:
            parts.append(title + "\n" + "\n".join(kept))
    parts.append(task)
    return [{"role": "system", "content": COMPACT_SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


# ------------------------------------------------------------------------------------- one component per request

COMPONENT_SYSTEM_PROMPT = (
    "You improve one setting of the harness around a small language model (the text and settings that turn a "
    "problem into its input and its output into an answer). You reply with one JSON object and nothing else."
)


def _component_of(text: str, component: str) -> str | None:
    """The component's value in a harness text, as compact JSON (None when the text is not a harness)."""
    import json

    from whale_core.harness import Harness
    from whale_core.proposers.components import component_value

    try:
        return json.dumps(component_value(component, Harness.from_text(text)), ensure_ascii=False)
    except Exception:  # a raw rejected text: shown through its reason only
        return None


def build_component_messages(
    context: ProposalContext,
    component: str,
    current: str,
    form: str,
    fenced: bool,
    context_tokens: int,
    count: Callable[[str], int] = estimate_tokens,
    pivot: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages asking for a new value of one harness ``component`` (`whale_core.proposers.components`).

    Always kept: the task, the component's allowed form, its ``current`` value (JSON) with the incumbent's score, and
    the request. Fitted into ``context_tokens`` as ``count`` measures them, in this order: earlier values of this
    component with their scores (best first), past rejections of this component with their reasons (newest first),
    then failing traces of the incumbent. ``fenced``: ask for the object inside one ```json block (for providers
    without a JSON mode). ``pivot``: the setting the reply must change (named in the request).
    """
    inc = context.incumbent
    score = "not scored" if inc.score is None else f"score {inc.score:.3f} on {inc.n} problems"
    head = (
        f"Task: {context.suite_description.strip()}\n\n"
        f"You change one part of the harness, `{component}`: {form}.\n\n"
        f"Its current value ({score}):\n{current}"
    )
    where = " inside one ```json block" if fenced else ""
    task = (
        f"Reply with one JSON object{where} with the same keys as the current value, holding a new, different "
        f"value for `{component}` that you expect to score higher" + (f"; change `{pivot}` at least." if pivot else ".")
    )
    tried: list[str] = []
    seen = {current}
    for i in _archive_priority(context):
        entry = context.archive[i]
        if entry.score is None or entry.status == "rejected":
            continue
        value = _component_of(entry.text, component)
        if value is not None and value not in seen:
            seen.add(value)
            tried.append(f"- {clip(value, 300)}: score {entry.score:.3f}")
    rejected = [
        f"- {clip(entry.reason or '', 200)}"
        for entry in reversed(context.archive)
        if entry.status == "rejected" and (entry.reason or "").startswith(f"{component}:")
    ]
    traces = [_compact_trace(t) for t in context.failing_traces]
    budget = context_tokens - count(COMPONENT_SYSTEM_PROMPT) - count(head) - count(task) - 32
    parts = [head]
    sections = [
        (f"Other values of `{component}` tried (score of the harness with it):", tried),
        (f"Earlier replies for `{component}` that were rejected, and why:", rejected),
        ("Problems the current harness got wrong:", traces),
    ]
    for left, (title, lines) in zip((3, 2, 1), sections, strict=True):
        kept, used = _fit(title, lines, budget // left, count)  # what a section leaves goes to the ones after it
        if kept:
            budget -= used
            parts.append(title + "\n" + "\n".join(kept))
    parts.append(task)
    return [{"role": "system", "content": COMPONENT_SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]
