"""Time-limited regular expressions for parse pipelines, and the check that rejects catastrophic ones.

A harness regex is data written by a proposer (possibly an LLM), so it is treated as untrusted:

1. It must compile under both the ``regex`` package (which runs it, with a timeout) and Python's ``re`` syntax
   (whose parser gives us an AST to inspect). ``regex``-only features (fuzzy matching, recursion, ``\\p{..}``)
   are therefore refused: they widen the attack surface and nothing in a parse pipeline needs them.
2. A static check walks the ``re`` AST (``re._parser``, Python 3.11/3.12) and rejects the shapes behind
   catastrophic backtracking: a large repeat (``+``, ``*``, ``{n,}`` or ``{n,m}`` with m > 16) nested inside
   another large repeat (``(a+)+``, ``(a*)*``, ``(.*)*``, ``(\\w+\\s?)+``; ``(?:\\d{1,3},)*`` is fine), and an
   alternation inside a large repeat whose branches can start with the same character or match the empty string
   (``(a|aa)+``, ``(a|a?)+``, ``(a.|ab)+``). This is deliberately conservative (star height ≤ 1): it also refuses
   some harmless patterns such as ``(\\d+,)+``, and the message says how to rewrite.
3. A probe runs the pattern against adversarial inputs (each character from a fixed set plus the pattern's own
   literal characters, repeated 32 and 512 times, then ``!``) under `PROBE_TIMEOUT_S`; a timeout rejects it.

Why 512 and not 5000: the regex engine is quadratic on some everyday patterns, e.g. ``(-?\\d+)\\s*$`` takes
~14 ms on ``'0' * 512`` but ~1.4 s on ``'0' * 5000`` (measured on the 2-core dev box). A 5000-char probe would
reject such patterns, and do so only sometimes on a noisy machine; the validity of a harness must be deterministic.
Exponential patterns blow up at a few dozen characters, which the 32/512 probes catch with a wide margin.
Completions are at most ``decoding.max_new_tokens`` (≤ 512) tokens, and at run time every search also runs under
`RUN_TIMEOUT_S`; a timeout there becomes an `AnswerParseError`.
"""

from __future__ import annotations

import functools
import re
import re._constants as sre_c  # type: ignore[import-not-found,unused-ignore]
import re._parser as sre_parse  # type: ignore[import-not-found,unused-ignore]
from typing import Any

import regex

from whale_core.harness.errors import AnswerParseError

MAX_PATTERN_CHARS = 500
LARGE_REPEAT = 16  # a repeat whose upper bound exceeds this (or is unbounded) counts as "large"
RUN_TIMEOUT_S = 0.1
PROBE_TIMEOUT_S = 0.25
PROBE_LENGTHS = (32, 512)
_PROBE_CHARS = "a0 1\n,-.x_"
_SAMPLE_CHARS = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "ß", "٣", "中", "\x00"]

_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", sre_c.MAX_REPEAT)}


def check_pattern(pattern: str) -> str | None:
    """Return why ``pattern`` is unsafe or invalid, or None if it may be used in a parse pipeline."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"regex too long: {len(pattern)} chars (max {MAX_PATTERN_CHARS})"
    try:
        compiled = regex.compile(pattern)
    except regex.error as e:
        return f"regex does not compile: {e}"
    try:
        tree = sre_parse.parse(pattern)
    except re.error as e:
        return f"regex uses syntax outside Python's `re` dialect ({e}); only `re` syntax is allowed"
    except RecursionError:
        return "regex nests too deeply"
    problem = _static_problem(list(tree), inside_large=False)
    if problem:
        return problem
    for text in _probe_inputs(pattern, tree):
        try:
            compiled.search(text, timeout=PROBE_TIMEOUT_S)
        except TimeoutError:
            return (
                f"regex is too slow (catastrophic backtracking): a probe of {len(text)} chars "
                f"took > {PROBE_TIMEOUT_S} s"
            )
    return None


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def timed_search(pattern: str, text: str, timeout: float = RUN_TIMEOUT_S) -> str:
    """First capture group (or the whole match if the pattern has no group) of ``pattern`` in ``text``.

    Raises `AnswerParseError` on no match, on a capture group that did not take part in the match, and when the
    search runs past ``timeout`` seconds.
    """
    try:
        m = _compiled(pattern).search(text, timeout=timeout)
    except TimeoutError:
        raise AnswerParseError(f"regex {pattern!r} timed out after {timeout} s") from None
    if m is None:
        raise AnswerParseError(f"regex {pattern!r} found no match")
    value = m.group(1) if m.re.groups else m.group(0)
    if value is None:
        raise AnswerParseError(f"regex {pattern!r} matched but its first group is empty")
    return str(value)


# ---------------------------------------------------------------------------------------------------------- static


def _is_large(hi: int) -> bool:
    return hi == sre_c.MAXREPEAT or hi > LARGE_REPEAT


def _static_problem(items: list[tuple[Any, Any]], inside_large: bool) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            _lo, hi, body = av
            large = _is_large(hi)
            if large and inside_large:
                return (
                    "regex nests a repeat (+, *, {n,}) inside another repeat, which can backtrack catastrophically; "
                    "use one repeat over a character class instead, e.g. '[0-9,]+' rather than '(\\d+,)+'"
                )
            problem = _static_problem(list(body), inside_large or large)
            if problem:
                return problem
        elif op is sre_c.SUBPATTERN:
            problem = _static_problem(list(av[-1]), inside_large)
            if problem:
                return problem
        elif op is sre_c.BRANCH:
            alts = [list(a) for a in av[1]]
            if inside_large and _branches_overlap(alts):
                return (
                    "regex repeats an alternation whose branches can match the same text (e.g. '(a|aa)+'), which can "
                    "backtrack catastrophically; make the branches start with different characters"
                )
            for alt in alts:
                problem = _static_problem(alt, inside_large)
                if problem:
                    return problem
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            problem = _static_problem(list(av[1]), inside_large)
            if problem:
                return problem
        elif op is getattr(sre_c, "ATOMIC_GROUP", None):
            problem = _static_problem(list(av), inside_large)
            if problem:
                return problem
        elif op is sre_c.GROUPREF_EXISTS:
            for sub in av[1:]:
                if sub is not None:
                    problem = _static_problem(list(sub), inside_large)
                    if problem:
                        return problem
    return None


def _branches_overlap(alts: list[list[tuple[Any, Any]]]) -> bool:
    seen: set[str] = set()
    for alt in alts:
        first, nullable = _first_chars(alt)
        if nullable or seen & first:
            return True
        seen |= first
    return False


def _first_chars(items: list[tuple[Any, Any]]) -> tuple[set[str], bool]:
    """(sample characters that can start a match of ``items``, whether ``items`` can match the empty string)."""
    out: set[str] = set()
    for op, av in items:
        first, nullable = _first_of(op, av)
        out |= first
        if not nullable:
            return out, False
    return out, True


def _first_of(op: Any, av: Any) -> tuple[set[str], bool]:
    everything = set(_SAMPLE_CHARS)
    if op is sre_c.LITERAL:
        c = chr(av)
        return {c, c.lower(), c.upper()}, False
    if op is sre_c.NOT_LITERAL:
        return everything - {chr(av)}, False
    if op is sre_c.ANY:
        return everything - {"\n"}, False
    if op is sre_c.IN:
        return {c for c in _SAMPLE_CHARS if _in_set(c, av)}, False
    if op in (sre_c.AT, sre_c.ASSERT, sre_c.ASSERT_NOT):
        return set(), True
    if op in _REPEATS:
        lo, _hi, body = av
        first, nullable = _first_chars(list(body))
        return first, nullable or lo == 0
    if op is sre_c.SUBPATTERN:
        return _first_chars(list(av[-1]))
    if op is getattr(sre_c, "ATOMIC_GROUP", None):
        return _first_chars(list(av))
    if op is sre_c.BRANCH:
        out: set[str] = set()
        any_nullable = False
        for alt in av[1]:
            first, nullable = _first_chars(list(alt))
            out |= first
            any_nullable = any_nullable or nullable
        return out, any_nullable
    return everything, True  # back-references, conditionals, anything unknown: assume the worst


_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: str.isdigit,
    sre_c.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre_c.CATEGORY_SPACE: str.isspace,
    sre_c.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre_c.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre_c.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}


def _in_set(c: str, members: list[tuple[Any, Any]]) -> bool:
    negate = False
    hit = False
    for op, av in members:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            hit = hit or c in {chr(av), chr(av).lower(), chr(av).upper()}
        elif op is sre_c.RANGE:
            hit = hit or any(av[0] <= ord(x) <= av[1] for x in (c, c.lower(), c.upper()))
        elif op is sre_c.CATEGORY:
            hit = hit or bool(_CATEGORIES.get(av, lambda _c: True)(c))
        else:
            hit = True  # unknown member: assume it matches
    return hit != negate


def _literal_chars(items: list[tuple[Any, Any]], out: set[str]) -> None:
    for op, av in items:
        if op is sre_c.LITERAL:
            out.add(chr(av))
        elif isinstance(av, list | tuple):
            for x in av:
                if isinstance(x, sre_parse.SubPattern):
                    _literal_chars(list(x), out)
                elif isinstance(x, list):
                    for y in x:
                        if isinstance(y, sre_parse.SubPattern):
                            _literal_chars(list(y), out)


def _probe_inputs(pattern: str, tree: Any) -> list[str]:
    chars = set(_PROBE_CHARS)
    literals: set[str] = set()
    _literal_chars(list(tree), literals)
    chars |= set(sorted(literals)[:16])
    ordered = sorted(chars)
    return [c * n + "!" for n in PROBE_LENGTHS for c in ordered]
