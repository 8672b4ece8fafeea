"""Render-time bounds: each class of hostile template ends as a HarnessError/RenderError within the budget.

Before the bounds (commit c4ab56b), each attack below rendered (or died of MemoryError) after building huge values:
``replace`` chains built 100 MiB - 1 GiB strings, ``~``/``+`` doubling chains 2.4 GiB, a tower of list literals
exhausted memory after 22 s, ``big|max`` in two nested loops took 55 s. Each test here asserts the rejection, its
reason, and a tracemalloc peak far below those figures; no timed assertion except a wide bound where it is the point.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml

from whale_core.harness import Harness, HarnessError, RenderError
from whale_core.harness.render import check_template, render_source
from whale_core.proposers.base import check_candidate
from whale_core.suites.base import Problem

Q = "1234567890" * 10  # a 100-char problem field
BIG = "{% set big = q|replace('1', q)|replace('1', q) %}"  # ~10K chars from a 100-char field: within the bounds

ATTACKS = {
    # name: (template, words expected in the reason)
    "replace-empty-needle": (
        "{% set e = q[:0] %}{{ q|replace(e, q)|replace(e, q)|replace(e, q)|length }}",
        "'replace' result would exceed",
    ),
    "replace-needle": (
        "{% set a = q|replace('1', q) %}{% set b = a|replace('1', a) %}{{ b|replace('1', b)|length }}",
        "'replace' result would exceed",
    ),
    "join": ("{% set a = q|join(q) %}{% set b = a|join(a) %}{{ b|length }}", "'join' result would exceed"),
    "concat-doubling": ("{% set a = q ~ q %}" + "{% set a = a ~ a %}" * 26 + "{{ a|length }}", "'~' result"),
    "plus-doubling": ("{% set a = q + q %}" + "{% set a = a + a %}" * 26 + "{{ a|length }}", "'+' result"),
    "list-tower": (
        "{% set a = [q,q,q,q,q,q,q,q] %}" + "{% set a = [a,a,a,a,a,a,a,a] %}" * 8 + "{{ a|string|length }}",
        "list/dict literal would exceed",
    ),
    "list-tower-printed": (
        "{% set a = [q,q,q,q] %}" + "{% set a = [a,a,a,a] %}" * 6 + "{{ a }}",
        "exceed",
    ),
    "silent-loops": (
        BIG + "{% for a in big %}{% for b in big %}{% if a == 'z' %}x{% endif %}{% endfor %}{% endfor %}",
        "loop iterations",
    ),
    "percent-format": ("{% set f = '%' ~ '0999999999d' %}{{ (f % 1)|length }}", "formatting with %"),
    "sum-of-lists": (
        "{% set a = q|list %}{% set b = [a,a,a,a,a,a,a,a,a,a] %}{% set c = [b,b,b,b,b,b,b,b,b,b] %}"
        "{% set d = [c,c,c,c,c,c,c,c,c,c] %}{{ d|sum(start=[])|sum(start=[])|sum(start=[])|length }}",
        "too much work",
    ),
    "list-of-chars": (
        BIG + "{% set b = big ~ big ~ big ~ big ~ big ~ big ~ big ~ big %}"
        "{{ (b ~ b ~ b ~ b ~ b ~ b ~ b ~ b)|list|length }}",
        "'list'",
    ),
    "compare-big": (
        BIG + "{% set b2 = big ~ '' %}{% for a in q %}{% for b in q %}{% if big == b2 %}x{% endif %}{% endfor %}"
        "{% endfor %}",
        "too much work",
    ),
    "slice-copies": (
        BIG + "{% for a in q %}{% for b in q %}{% if big[1:]|length == 3 %}x{% endif %}{% endfor %}{% endfor %}",
        "too much work",
    ),
    "max-in-loops": (
        "{% set big = (q|replace('1', q)|replace('1', q))|list %}"
        "{% for a in q %}{% for b in q %}{{ big|max }}{% endfor %}{% endfor %}",
        "too much work",
    ),
}


# The attacks that build values (the rest burn time): their memory peak is measured (tracemalloc slows the others'
# Python-level walks several-fold, which would only test the wall-time backstop).
ALLOCATING = {"replace-empty-needle", "replace-needle", "join", "concat-doubling", "plus-doubling", "list-tower",
              "list-tower-printed", "percent-format", "list-of-chars"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_bounded_at_render_and_rejected_at_validation(name):
    source, reason = ATTACKS[name]
    if name in ALLOCATING:
        tracemalloc.start()
    try:
        t0 = time.perf_counter()
        with pytest.raises(RenderError) as info:
            render_source(source, {"q": Q}, "template", "p1")
        elapsed = time.perf_counter() - t0
        with pytest.raises(HarnessError) as rejected:  # the validation probe sees it too: a recorded rejection
            Harness.from_text(yaml.safe_dump({"whale_harness": 1, "template": source}))
        peak = tracemalloc.get_traced_memory()[1]  # 0 when not tracing
    finally:
        tracemalloc.stop()
    # The attacks that burn time may meet the wall-time backstop first on a very busy machine: also a bound.
    reasons = (reason,) if name in ALLOCATING else (reason, "rendering took longer than")
    assert any(r in str(info.value) for r in reasons) and "problem 'p1'" in str(info.value), info.value
    assert rejected.value.field == "template" and any(r in str(rejected.value) for r in reasons), rejected.value
    assert peak < 64 << 20, f"{name}: peak {peak >> 20} MiB"
    assert elapsed < 30, f"{name}: {elapsed:.1f} s"  # a wide bound: the point is that it ends (~0.4 s measured)


def test_llm_candidate_that_would_hang_is_a_recorded_rejection() -> None:
    """What a proposer does with a reply block (`check_candidate`): a rejection with the reason, no exception."""
    incumbent = Harness.from_text("whale_harness: 1\ntemplate: '{{ q }}'\n")
    source = ATTACKS["silent-loops"][0]
    t0 = time.perf_counter()
    prop = check_candidate(yaml.safe_dump({"whale_harness": 1, "template": source}), incumbent, None, "llm")
    assert prop.status == "rejected" and prop.harness is None
    assert "template too costly" in (prop.reason or ""), prop.reason
    assert time.perf_counter() - t0 < 30  # a wide bound: the point is that it ends (~0.2 s measured)


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{{ q|replace('', q) }}", "replace with an empty search string"),
        ("{{ q|replace(old='', new=q) }}", "replace with an empty search string"),
        ("{% for a in q %}{% for b in q %}{% endfor %}{% endfor %}", "prints nothing"),
        ("{% for a in q %}{% set x = a %}{% endfor %}", "prints nothing"),
        ("{{ 'x' * 1000000000 }}", "the * operator"),
        ("{{ 10 ** 100000000 }}", "the ** operator"),
        ("{% for i in range(1000000000) %}x{% endfor %}", "function or method calls"),
        ("{{ '%0999999999d' % 1 }}", "formatting with %"),
    ],
)
def test_static_rejections(source, reason):
    with pytest.raises(HarnessError) as info:
        check_template(source, "template")
    assert reason in info.value.problem


def test_template_that_python_cannot_compile_is_refused_at_validation():
    """200 nested ifs parse as Jinja but exceed Python's indentation limit when compiled (before: valid, then a
    RenderError on every problem)."""
    with pytest.raises(HarnessError, match="template does not compile: IndentationError"):
        check_template("{% if a %}" * 200 + "x" + "{% endif %}" * 200, "template")


def test_runtime_only_blowup_on_real_data_is_a_render_error():
    """Nested loops over a field are fine on the short validation probe but too many iterations on a long field."""
    h = Harness.from_text("whale_harness: 1\ntemplate: '{% for a in q %}{% for b in q %}{% if a == b %}.{% endif %}"
                          "{% endfor %}{% endfor %}'\n")  # fmt: skip
    assert h.render(Problem("short", {"q": "ab"}, "0"), []) == ".."
    with pytest.raises(RenderError, match=r"more than 100000 loop iterations|rendering took longer than"):
        h.render(Problem("long", {"q": "".join(chr(0x4E00 + i) for i in range(400))}, "0"), [])


def test_budget_is_per_render_and_legit_templates_unaffected():
    source = "{% for d in q %}{{ d }}{% if not loop.last %},{% endif %}{% endfor %}|{{ [q, q|upper]|join('/') }}"
    check_template(source, "template")
    for _ in range(3):  # each render gets a fresh budget
        out = render_source(source, {"q": "ab1"}, "template", "p")
        assert out == "a,b,1|ab1/AB1"
    big = {"q": "y" * 50_000}  # a long field passes through as long as nothing amplifies it
    assert render_source("{{ q|upper|length }} {{ q[:3] }}", big, "template", "p") == "50000 yyy"


def test_compile_time_constant_folding_is_bounded():
    """Jinja folds constant expressions while compiling: the wrapped filters bound that too."""
    source = "{{ ('" + "a" * 600 + "'|replace('a', '" + "b" * 600 + "'))|replace('b', '" + "c" * 600 + "')|length }}"
    with pytest.raises(RenderError, match="'replace' result would exceed"):
        render_source(source, {}, "template", "p")
