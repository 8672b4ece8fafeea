"""The one rule for a file a user names — a config, a suite's data file, a harness: a regular file, read with a bound.

A FIFO blocks forever on open, a device such as ``/dev/zero`` never ends (it grew a process to 20.8 GB before the
kernel killed it), a directory is not a file: each is refused with a message that names the path and what it is,
before anything is opened. A regular file larger than the bound is refused after reading at most bound + 1 bytes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def read_user_file(path: str | Path, what: str, limit: int, error: Callable[[str], Exception]) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); else ``error(message)`` is raised, the message
    naming ``what`` (``"config file"``, ``"data file"``) and the path."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise error(f"{what} not found: {p}") from None
    except OSError as exc:
        raise error(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise error(f"{what} {p} is {kind}, not a regular file")
    try:
        with open(p, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise error(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise error(f"{what} {p} is larger than {limit:,} bytes")
    return raw
