"""Errors raised by the harness package.

- `HarnessError` (a `ValueError`): a harness text is invalid. ``field`` is the dotted path of the offending field
  (``fewshot.k``, ``parse[2].regex``, ``messages[0].content``; ``""`` for the document as a whole) and ``problem``
  is human text. ``str(e)`` reads ``harness field 'fewshot.k': must be <= 16 (got 99)``. Proposers store it as the
  reason a candidate was rejected.
- `RenderError` (a `HarnessError`): a valid harness could not render one problem (a field the template uses is
  missing, the output is too large). The rollout engine catches it per example.
- `AnswerParseError` (a `ValueError`): the parse pipeline found no answer in a completion; ``reason`` says why.
  It is an expected outcome (the answer scores 0), not a bug.

All three pickle (they may cross process or Prefect task boundaries).
"""

from __future__ import annotations

from typing import Any

from whale_core.errors import WhaleError


class HarnessError(WhaleError, ValueError):
    """An invalid harness: ``field`` (dotted path, ``""`` = whole document) and ``problem`` (human text)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        where = f"harness field {field!r}" if field else "harness"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.problem))


class RenderError(HarnessError):
    """A valid harness failed to render one problem (e.g. a template variable the problem does not have)."""


class AnswerParseError(ValueError):
    """No answer could be parsed from a completion; ``reason`` says which step failed and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"could not parse an answer: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))
