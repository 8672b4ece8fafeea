"""The archive's read-only mode: every method that writes is marked `writes`, and a read-only view skips it.

A resumed run replays an iteration the archive already holds as *done*: its code runs again (its tasks come back
``Cached``) but its records exist from the first attempt. `Archive.read_only_view` gives that code an archive whose
reads pass through and whose marked writes return `SKIPPED` (a stand-in record: ``id`` -1, every other field None)
without touching the store. A write method that someone forgot to mark does not slip through: in a read-only view
the write transaction itself (`Archive._write`) raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

WRITES_ATTR = "__whale_writes__"


class SkippedWrite:
    """Stands in for the record a skipped write would have returned (``id`` -1, any other field None)."""

    id = -1

    def __getattr__(self, name: str) -> Any:
        return None

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = SkippedWrite()


class _HasMode(Protocol):
    read_only: bool


F = TypeVar("F", bound=Callable[..., Any])


def writes(method: F) -> F:
    """Mark an `Archive` method as one that writes: on a read-only view it returns `SKIPPED` and writes nothing."""

    @functools.wraps(method)
    def wrapper(self: _HasMode, *args: Any, **kwargs: Any) -> Any:
        if self.read_only:
            return SKIPPED
        return method(self, *args, **kwargs)

    setattr(wrapper, WRITES_ATTR, True)
    return cast(F, wrapper)


def is_write(method: Any) -> bool:
    """Whether ``method`` (a function or bound method) is marked `writes`."""
    return bool(getattr(method, WRITES_ATTR, False))
