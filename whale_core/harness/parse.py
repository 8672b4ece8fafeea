"""Answer encoding (how answers are written in demos) and the safe parse pipeline (completion -> answer string).

Encoding is generic: it works on any answer string. A leading ``-`` is a sign and stays in front; the rest (the
body) is left-padded with ``'0'`` to ``pad`` characters, then reversed, then ``sep`` is inserted between its
characters: ``-42`` with ``pad=4, reverse, sep=','`` is written ``-2,4,0,0``.

`parse_completion` cuts the completion at the earliest ``decoding.stop`` string, runs the parse steps in order
(each a one-key mapping, no code execution; an empty list means "the stripped completion"), strips the result,
and undoes the encoding (remove ``sep``, un-reverse, strip the padding zeros when ``pad > 0`` keeping at least one
digit). Anything that yields nothing raises `AnswerParseError` with the reason.

Steps: ``regex`` (first capture group, else the whole match; time-limited, see `regexes`), ``strip`` (true =
whitespace, or a string of characters), ``remove`` (delete every occurrence), ``reverse``, ``lower``, ``upper``,
``first_line`` / ``last_line`` (first/last non-blank line), ``int`` (normalize an integer: sign, leading zeros,
``,``/``_`` separators; fail if not an integer), ``number`` (one number of the text: ``first``, ``last``, or ``new``,
the first number that does not appear in the problem's own fields — a model that echoes the question before it
answers, "16, 17, 18, 19, 20", is parsed as 20 where the first number would be 16), ``after`` (the text after the
last occurrence of a cue such as ``"answer is"`` or ``"="``; fail if the cue is absent). Note that steps see the
*encoded* text: with ``answer.reverse``, leading zeros are significant, so ``int`` there loses digits; use a regex
instead.

What counts as echoed: the numbers written in the problem's fields (never its answer), compared as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from whale_core.harness.errors import AnswerParseError
from whale_core.harness.regexes import RUN_TIMEOUT_S, timed_search

Step = tuple[str, bool | str]  # (op, argument), e.g. ("regex", "^(-?[0-9]+)"), ("strip", True)

STEP_OPS = (
    "regex", "strip", "remove", "reverse", "lower", "upper", "first_line", "last_line", "int", "number", "after",
)  # fmt: skip
NUMBER_PICKS = ("first", "last", "new")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def numbers_in(text: str) -> list[str]:
    """The numbers written in ``text``, in order (``-3``, ``42``, ``2.5``)."""
    return _NUMBER.findall(text)


def echoed_numbers(fields: Iterable[object]) -> frozenset[str]:
    """The numbers of a problem's field values: what a ``number: new`` step skips."""
    return frozenset(n for v in fields for n in numbers_in(str(v)))


def _split_sign(text: str) -> tuple[str, str]:
    return ("-", text[1:]) if text.startswith("-") else ("", text)


def encode_answer(gold: str, reverse: bool, pad: int, sep: str) -> str:
    """The answer as the harness writes it (in demos, and as the model is expected to write it)."""
    sign, body = _split_sign(gold)
    if pad > 0:
        body = body.rjust(pad, "0")
    if reverse:
        body = body[::-1]
    if sep:
        body = sep.join(body)
    return sign + body


def decode_answer(written: str, reverse: bool, pad: int, sep: str) -> str:
    """Undo `encode_answer` on text the model wrote; raises `AnswerParseError` if nothing is left."""
    sign, body = _split_sign(written)
    if sep:
        body = body.replace(sep, "")
    if reverse:
        body = body[::-1]
    if pad > 0 and body.startswith("0"):
        stripped = body.lstrip("0")
        body = stripped if stripped[:1].isdigit() else "0" + stripped
    if not body:
        raise AnswerParseError(f"nothing left after undoing the answer encoding of {written!r}")
    return sign + body


def normalize_int(text: str) -> str:
    """``' +0001,234 '`` -> ``'1234'``; ``'-0'`` -> ``'0'``; raises `AnswerParseError` if not an integer."""
    s = text.strip().replace(",", "").replace("_", "")
    sign = ""
    if s[:1] in ("+", "-"):
        sign, s = ("-" if s[0] == "-" else ""), s[1:]
    if not s or not s.isascii() or not s.isdigit():
        raise AnswerParseError(f"int: {text[:40]!r} is not an integer")
    s = s.lstrip("0") or "0"
    return ("" if s == "0" else sign) + s


def _nonblank_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _number(pick: str, value: str, echoed: frozenset[str]) -> str:
    found = numbers_in(value)
    if pick == "new":
        found = [n for n in found if n not in echoed]
    if not found:
        more = " that is not in the problem" if pick == "new" else ""
        raise AnswerParseError(f"number: no number{more} in {value[:40]!r}")
    return found[-1] if pick == "last" else found[0]


def apply_step(
    op: str, arg: bool | str, value: str, timeout: float = RUN_TIMEOUT_S, echoed: frozenset[str] = frozenset()
) -> str:
    """Apply one parse step to ``value``. A ``False`` argument is a no-op. ``echoed``: the problem's numbers."""
    if arg is False:
        return value
    if op == "regex":
        return timed_search(str(arg), value, timeout)
    if op == "strip":
        return value.strip() if arg is True else value.strip(str(arg))
    if op == "remove":
        return value.replace(str(arg), "")
    if op == "reverse":
        return value[::-1]
    if op == "lower":
        return value.lower()
    if op == "upper":
        return value.upper()
    if op in ("first_line", "last_line"):
        lines = _nonblank_lines(value)
        if not lines:
            raise AnswerParseError(f"{op}: the text has no non-blank line")
        return lines[0] if op == "first_line" else lines[-1]
    if op == "int":
        return normalize_int(value)
    if op == "number":
        return _number(str(arg), value, echoed)
    if op == "after":
        cue = str(arg)
        at = value.rfind(cue)
        if at < 0:
            raise AnswerParseError(f"after: {cue!r} is not in {value[:40]!r}")
        return value[at + len(cue) :]
    raise AnswerParseError(f"unknown parse step {op!r}")


def cut_at_stop(completion: str, stop: Sequence[str]) -> str:
    """The completion up to (not including) the earliest occurrence of any stop string."""
    cut = len(completion)
    for s in stop:
        i = completion.find(s) if s else -1
        if 0 <= i < cut:
            cut = i
    return completion[:cut]


def parse_completion(
    completion: str,
    steps: Sequence[Step],
    stop: Sequence[str],
    reverse: bool,
    pad: int,
    sep: str,
    timeout: float = RUN_TIMEOUT_S,
    echoed: frozenset[str] = frozenset(),
) -> str:
    """Completion -> answer string: cut at stop, run the steps, strip, undo the encoding. ``echoed``: the problem's
    numbers (`echoed_numbers`), for ``number: new``."""
    value = cut_at_stop(completion, stop)
    if not steps:
        value = value.strip()
    for i, (op, arg) in enumerate(steps):
        try:
            value = apply_step(op, arg, value, timeout, echoed)
        except AnswerParseError as e:
            raise AnswerParseError(f"parse[{i}] {e.reason}") from None
    value = value.strip()
    if not value:
        raise AnswerParseError("the parse pipeline produced an empty answer")
    return decode_answer(value, reverse, pad, sep)
