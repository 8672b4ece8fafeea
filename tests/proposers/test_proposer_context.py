"""The LLM prompt: what it always contains, what it trims first, and how it says what it left out."""

from __future__ import annotations

from typing import Any

from whale_core.harness import Harness
from whale_core.proposers import FailingTrace
from whale_core.proposers.context import build_messages, clip, estimate_tokens


def _text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_prompt_contains_every_part(seed_harness: Harness, make_ctx: Any, make_entry: Any) -> None:
    child = seed_harness.evolve(answer={"reverse": True})
    rejected = make_entry(seed_harness.evolve(name="bad"), score=None, status="rejected", reason="WHY-REJECTED")
    trace = FailingTrace("val-7", "Add the two numbers.\n55+17=", "62", "62", "72", None)
    ctx = make_ctx(seed_harness, [make_entry(child, score=0.41, status="evaluated"), rejected], [trace])
    messages = build_messages(ctx, 3, 6000)
    assert [m["role"] for m in messages] == ["system", "user"]
    text = _text(messages)
    for part in ("Integer addition", "## Harness format", seed_harness.sha[:12], "score: 0.3000 on 200 problems",
                 child.sha[:12], "score: 0.4100", "+  reverse: true", "WHY-REJECTED", "val-7", "55+17=",
                 "gold answer: '72'", "Propose 3 new candidate", "```yaml"):  # fmt: skip
        assert part in text, part
    assert "RESTRICTION" not in text


def test_prompt_weights_restriction_is_stated(seed_harness: Harness, make_ctx: Any) -> None:
    text = _text(build_messages(make_ctx(seed_harness, restrict_to=frozenset({"instruction"})), 2, 6000))
    assert "RESTRICTION: only 'instruction' may differ from the incumbent" in text


def test_trimming_drops_lowest_archive_entries_and_longest_traces(
    seed_harness: Harness, make_ctx: Any, make_entry: Any
) -> None:
    archive = [
        make_entry(seed_harness.evolve(decoding={"max_new_tokens": t}), score=t / 100, status="evaluated")
        for t in range(9, 40)
    ]
    traces = [FailingTrace(f"long-{i}", "1+1=" * 300, "x" * 400, None, "2", "no match") for i in range(20)]
    traces.append(FailingTrace("short", "1+2=", "4", "4", "3", None))
    small = build_messages(make_ctx(seed_harness, archive, traces), 2, 2500)
    text = _text(small)
    assert estimate_tokens(text) <= 2500
    shown = [e for e in archive if e.sha[:12] in text]
    assert shown and len(shown) < len(archive)
    assert min(e.score for e in shown) > max(e.score for e in archive if e not in shown)  # the best are kept
    assert "short" in text and "more left out for length" in text
    big = _text(build_messages(make_ctx(seed_harness, archive, traces), 2, 200_000))
    assert all(e.sha[:12] in big for e in archive) and "left out" not in big


def test_fixed_parts_survive_a_tiny_budget(seed_harness: Harness, make_ctx: Any, make_entry: Any) -> None:
    ctx = make_ctx(seed_harness, [make_entry(seed_harness.evolve(name="z"), status="evaluated")])
    text = _text(build_messages(ctx, 1, 10))
    assert "## Harness format" in text and seed_harness.text.splitlines()[1] in text
    assert "(none shown)" in text and "1 more left out for length" in text


def test_clip_keeps_the_requested_end() -> None:
    text = "HEAD" + "-" * 1000 + "TAIL"
    assert clip("short", 10) == "short"
    assert clip(text, 100, keep="tail").endswith("TAIL") and "chars cut" in clip(text, 100, keep="tail")
    assert clip(text, 100).startswith("HEAD") and not clip(text, 100).endswith("TAIL")
    both = clip(text, 100, keep="both")
    assert both.startswith("HEAD") and both.endswith("TAIL") and len(both) < 150
