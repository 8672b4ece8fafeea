"""How a user error looks on the ``whale`` command line: ``error: <message>``, one line on stderr, exit code 2.

`GuardedGroup` is the root command group of `whale_cli.app`: every command and sub-command (``whale models …``
included) runs inside its `invoke`, so this one place turns a user error into that line with no traceback, for
commands written later too:

- any `WhaleError` — structural: a new error class joins by subclassing it, no list of types to keep up to date;
  anything else is a bug and keeps its traceback;
- a sub-command's bad parameter value (a bound such as ``--batch-size 0``, a malformed number, a missing option),
  which Typer would otherwise draw as a box wrapped to the terminal's width;
- an error that only the environment causes (a full disk or quota, a read-only file system, no permission), as an
  `OSError` or inside a library's own error (`environment_cause`): the user's to fix wherever the write happened,
  never a bug.

Simplified: other usage errors (an unknown option or command) keep Typer's own box; they also exit 2.
"""

from __future__ import annotations

import errno
import os
from typing import Any

import typer
from typer.core import TyperGroup

from whale_core.errors import WhaleError

__all__ = ["CliError", "GuardedGroup", "print_error"]

_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
# SQLite's own words for an errno it does not pass on (SQLITE_FULL, SQLITE_READONLY), as sqlite3 and SQLAlchemy,
# and MLflow after them, quote them
_SQLITE_MESSAGES = {
    "database or disk is full": errno.ENOSPC,
    "attempt to write a readonly database": errno.EROFS,
}


class CliError(WhaleError, ValueError):
    """A command-line argument that parsed but cannot be used (a bound, a choice); the message names the option."""


def print_error(message: str) -> None:
    """``error: <message>`` on one line of stderr: no rich markup (a message may quote ``[...]``), no wrapping at the
    terminal's width, and a multi-line message (a YAML parser's, pydantic's) joined with ``; `` (after a colon: a
    space)."""
    from whale_cli.common import visible

    text = ""
    for line in (visible(x).strip() for x in message.splitlines()):
        if line:  # "invalid configuration:" + "unknown key …" reads as one sentence, other lines as a list
            text += (" " if text.endswith(":") else "; " if text else "") + line
    typer.secho("error:", fg=typer.colors.RED, bold=True, err=True, nl=False)  # colour only on a terminal
    typer.echo(f" {text}", err=True)


class GuardedGroup(TyperGroup):
    """The root command group (see the module docstring)."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context (a private module)
        try:
            return super().invoke(ctx)
        except WhaleError as exc:
            print_error(str(exc) or type(exc).__name__)
            raise typer.Exit(2) from None
        except typer.BadParameter as exc:
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            print_error(f"{exc.format_message()} (see `{where} --help`)")
            raise typer.Exit(exc.exit_code) from None
        except typer.Exit:  # a command's own exit (it printed its line), whatever it was raised from
            raise
        except Exception as exc:
            cause = environment_cause(exc)
            if cause is None:
                raise
            print_error(f"{cause}: free space or choose a writable place (WHALE_HOME, --out)")
            raise typer.Exit(2) from None


def environment_cause(exc: BaseException) -> str | None:
    """What the environment did, when ``exc`` or an exception it was raised from is one the user must fix (a full disk
    or quota, a read-only file system, no permission): an `OSError` with such an errno, or a library's own error that
    carries the system's message (safetensors' ``SafetensorError: ... No space left on device``) or SQLite's (``database
    or disk is full``, through SQLAlchemy or MLflow). None otherwise."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in _ENVIRONMENT_ERRNOS:
            where = f" ({cur.filename})" if cur.filename else ""
            return f"{cur.strerror or cur}{where}"
        text = str(cur)
        for code in _ENVIRONMENT_ERRNOS:
            if os.strerror(code) in text:
                return f"{os.strerror(code)} ({type(cur).__name__}: {text[:200]})"
        for words, code in _SQLITE_MESSAGES.items():
            if words in text:
                return f"{os.strerror(code)} ({type(cur).__name__}: {words})"
        cur = cur.__cause__ or cur.__context__
    return None
