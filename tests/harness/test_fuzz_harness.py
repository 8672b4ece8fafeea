"""Fuzz: mutated harness texts each end as a valid harness or a `HarnessError`, within a time and memory bound.

A seeded generator (``random.Random(FUZZ_SEED)``; deterministic, no example database) mutates the shipped seed
harnesses (the ``arith`` and ``sort`` suites', ``docs/harnesses/*.yaml``) and a chat-mode one: it inserts Jinja
constructs (hostile ones included: ``replace``/``join``/``~`` amplification, silent loops, calls, dunders, huge
numbers), Unicode (lone surrogates, NUL, RTL marks, line separators, emoji), deletes and duplicates lines and keys,
swaps values for random YAML (anchors, tags, flow collections, unclosed quotes), and truncates. Each text is
validated (`Harness.from_text`) and, when valid, rendered once on a real problem of its suite. Anything other than
success or a `HarnessError` (`RenderError` included) fails the test, as does a text whose validation + render takes
over `PER_TEXT_S` or that raises the process's peak RSS (``ru_maxrss``) by more than `PER_TEXT_RSS` (tracemalloc
would be exact but triples the runtime; before the render bounds, the amplifying snippets here built 0.1-2.4 GB).
The counts (texts, valid, rejected by reason class) are printed (``pytest -s``) and checked for spread, so a
generator that degenerates fails too.
"""

from __future__ import annotations

import collections
import random
import resource
import time
from pathlib import Path
from typing import Any

import yaml

from whale_core.harness import Harness, HarnessError, RenderError
from whale_core.suites.registry import SuiteConfig, load_suite

FUZZ_SEED = 20261206
N_TEXTS = 1200
PER_TEXT_S = 12.0  # generous: two renders (probe + one) under the 5 s wall-time backstop; measured max 0.03 s
PER_TEXT_RSS = 128 << 20
DOCS = Path(__file__).resolve().parents[2] / "docs" / "harnesses"

CHAT_SEED = """\
whale_harness: 1
name: chat-sum
instruction: Add the two numbers.
messages:
- {role: system, content: "{{ instruction }}"}
- {role: user, content: "{{ a }}+{{ b }}="}
parse: [{regex: '^\\s*(-?[0-9]+)'}]
"""

JINJA = [
    "{{ a }}", "{{ b|int + 1 }}", "{{ items|upper }}", "{% if a %}x{% endif %}", "{% for c in a %}{{ c }}{% endfor %}",
    "{{ a ~ b }}", "{{ [a, b]|join(',') }}", "{{ a|replace('1', 'one') }}", "{{ a|length }}", "{{ a[::-1] }}",
    "{{ a|replace('', a) }}", "{% set e = a[:0] %}{{ a|replace(e, a)|replace(e, a)|replace(e, a) }}",
    "{% set x = a|join(a) %}{{ x|join(x) }}", "{% set s = a ~ a %}" + "{% set s = s ~ s %}" * 25 + "{{ s|length }}",
    "{% set l = [a,a,a,a] %}" + "{% set l = [l,l,l,l] %}" * 9 + "{{ l }}",
    "{% for i in a %}{% for j in a %}{% endfor %}{% endfor %}", "{% for i in a %}{% for j in a %}{% for k in a %}"
    "{{ k }}{% endfor %}{% endfor %}{% endfor %}", "{{ ''.__class__.__mro__ }}", "{{ range(10**9)|list }}",
    "{{ 'x' * 10**9 }}", "{{ 9 ** 9 ** 9 }}", "{{ a.upper() }}", "{% macro m() %}{% endmacro %}",
    "{% include 'x' %}", "{{ cycler }}", "{{ lipsum(9) }}", "{% set f = '%' ~ '099999999d' %}{{ f % 1 }}",
    "{{ 99999999999999999999999999999999 + 1 }}", "{{ 1e308 * 10 }}", "{{ (a|int) // 0 }}", "{{ a|float / 0 }}",
    "{% for x in a recursive %}{{ loop(x) }}{% endfor %}", "{{ a|attr('x') }}", "{{ a|map('upper')|list }}",
    "{% raw %}{{ a }}{% endraw %}", "{#", "{{", "{%", "}}", "{% for %}", "{% endif %}", "{{ a|sum(start=[]) }}",
    "{{ {'k': a}.k }}", "{{ a is divisibleby 0 }}", "{{ a|truncate(999999999) }}", "{{ a|round(999999) }}",
    "{{ a|wordcount }}", "{% set n = a|int %}{{ n + n + n }}", "{{ loop }}", "{{ self }}", "{{ namespace() }}",
]  # fmt: skip
UNICODE = ["\udc80", "\ud800", "\x00", "\u202e", "\u2028", "\x85", "\U0001f600", "é", "中", "\ufeff", "\t", "\r"]
YAML_BITS = [
    "[", "]", "{", "}", ": ", "- ", "&a ", "*a", "!!python/object:os.system ", "!!binary ", "|", ">", "'", '"', "#",
    "? ", "---\n", "...\n", "%YAML 1.1\n", "\n  ", "\t", "null", "~", "true", "0x1F", "1e400", ".nan", "-.inf",
    "99999999999999999999999999", "-0", "!!str ", "<<: ", "{a: [1, {b: 2}]}",
]  # fmt: skip
NUMBERS = ["0", "-1", "99999999999999999999", "1e309", "-1e309", ".nan", "2.5", "17", "33", "513", "True", "'3'"]


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _seeds() -> list[tuple[str, str]]:
    """(suite, text) pairs: the suites' seed harnesses, the documented harnesses, and a chat-mode one."""
    out = [(name, load_suite(SuiteConfig(name=name, seed=0)).seed_harness) for name in ("arith", "sort")]
    out += [("arith", p.read_text(encoding="utf-8")) for p in sorted(DOCS.glob("*.yaml"))]
    out.append(("arith", CHAT_SEED))
    return out


def _mutate_template(text: str, rng: random.Random) -> str:
    """Insert Jinja into the template (or a message) through YAML, so the text still parses and reaches Jinja."""
    try:
        data = yaml.load(text, Loader=_LOADER)
    except (yaml.YAMLError, UnicodeError):
        return text
    if not isinstance(data, dict):
        return text
    snippet = rng.choice(JINJA).replace("items", rng.choice(["a", "b", "items"]))
    if isinstance(data.get("template"), str):
        t = data["template"]
        i = rng.randrange(len(t) + 1)
        data["template"] = t[:i] + snippet + t[i:]
    elif isinstance(data.get("messages"), list) and data["messages"]:
        m = rng.choice(data["messages"])
        if isinstance(m, dict):
            m["content"] = str(m.get("content", "")) + snippet
    try:
        return str(yaml.dump(data, Dumper=_DUMPER, allow_unicode=True, sort_keys=False))
    except (yaml.YAMLError, UnicodeError):  # libyaml cannot write a lone surrogate: keep the text as it was
        return text


def _mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        lines = text.split("\n")
        if op == 0 or op == 1:
            text = _mutate_template(text, rng)
        elif op == 2:  # raw Jinja anywhere (often breaks the YAML)
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(JINJA) + text[i:]
        elif op == 3:
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(UNICODE) * rng.randint(1, 3) + text[i:]
        elif op == 4 and len(lines) > 1:
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif op == 5:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == 6:
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(YAML_BITS) + text[i:]
        elif op == 7:  # a number swapped for an extreme or mistyped one
            digits = [j for j, c in enumerate(text) if c.isdigit()]
            if digits:
                j = rng.choice(digits)
                text = text[:j] + rng.choice(NUMBERS) + text[j + 1 :]
        else:
            text = text[: rng.randrange(len(text) + 1)]
    return text


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _reason_class(exc: HarnessError) -> str:
    p = exc.problem
    for key, words in (
        ("unicode", ("lone surrogate", "Unicode")),
        ("yaml", ("invalid YAML", "anchors", "YAML mapping", "duplicate key", "written back as YAML")),
        ("template-syntax", ("template syntax error", "nests too deeply", "does not compile")),
        ("template-unsafe", ("unsafe template",)),
        ("template-cost", ("too costly",)),
    ):
        if any(w in p for w in words):
            return key
    if exc.field.startswith("parse"):
        return "regex/parse"
    if exc.field in ("template", "messages") or exc.field.startswith("messages"):
        return "template-other"
    return "schema"


class _JoinTokenizer:
    """Stands in for a tokenizer's chat template: role-tagged contents (the render under test is WHALE's)."""

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_fuzzed_harness_texts_end_valid_or_harness_error_within_bounds() -> None:
    rng = random.Random(FUZZ_SEED)
    seeds = _seeds()
    problems = {name: load_suite(SuiteConfig(name=name, seed=0)).problems("train")[:8] for name in ("arith", "sort")}
    tok = _JoinTokenizer()
    counts: collections.Counter[str] = collections.Counter()
    worst: tuple[float, str] = (0.0, "")
    seen: set[str] = set()
    rss0 = _max_rss()
    for n in range(N_TEXTS):
        suite, seed_text = seeds[n % len(seeds)]
        text = _mutate(seed_text, rng)
        seen.add(text)
        problem = problems[suite][n % len(problems[suite])]
        before = _max_rss()
        t0 = time.perf_counter()
        outcome = _one(text, problem, tok)
        elapsed = time.perf_counter() - t0
        grew = _max_rss() - before
        counts[outcome] += 1
        worst = max(worst, (elapsed, text[:300]))
        assert elapsed <= PER_TEXT_S, f"text {n} took {elapsed:.2f} s: {text[:300]!r}"
        assert grew <= PER_TEXT_RSS, f"text {n} raised the peak RSS by {grew >> 20} MiB: {text[:300]!r}"
    worst_peak = _max_rss() - rss0
    valid = sum(v for k, v in counts.items() if k.startswith("valid"))
    rejected = {k: v for k, v in counts.items() if not k.startswith("valid")}
    print(
        f"\nfuzz: {N_TEXTS} texts ({len(seen)} distinct), valid {valid} ({dict(sorted(counts.items()))}), "
        f"slowest {worst[0]:.3f} s, peak RSS growth over the loop {worst_peak / 2**20:.1f} MiB"
    )
    assert sum(counts.values()) == N_TEXTS >= 1000 and len(seen) >= 900
    assert valid >= N_TEXTS // 10 and sum(rejected.values()) >= N_TEXTS // 10  # both paths exercised
    for reason in ("rejected:yaml", "rejected:schema", "rejected:template-unsafe", "rejected:template-cost"):
        assert counts[reason] > 0, f"the generator never produced {reason}: {dict(counts)}"


def _one(text: str, problem: Any, tok: _JoinTokenizer) -> str:
    """``valid:rendered``, ``valid:render-error`` or ``rejected:<reason class>``; anything else raises."""
    try:
        h = Harness.from_text(text)
    except HarnessError as exc:
        assert "\n" not in str(exc), repr(exc)  # a one-line reason (a CLI error line, a stored rejection)
        return f"rejected:{_reason_class(exc)}"
    try:
        out = h.render(problem, [], tokenizer=tok if h.is_chat else None)
    except RenderError:
        return "valid:render-error"
    assert isinstance(out, str)
    return "valid:rendered"
