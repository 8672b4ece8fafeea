"""The one console untrusted text is rendered through (issue 30, item 1 and the printed-field fuzz): markup prints
literally, control characters and bidirectional overrides print as visible escapes, in a line, a table cell or an
error line alike."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.table import Table

from whale_cli.common import console, line, styled, visible
from whale_cli.guard import print_error

RAW = "".join(chr(c) for c in [*range(0, 9), *range(11, 32), *range(127, 160)]) + "\u202a\u202b\u202c\u202d\u202e"


def _printed(*things: object) -> str:
    con = console()
    con.file = io.StringIO()
    for t in things:
        con.print(t)
    return str(con.file.getvalue())


@given(st.text(alphabet=st.sampled_from(["[", "]", "/", "b", "x", "\x1b", "\x9b", "\x07", "\r", "\u202e", "\n"])))
def test_any_text_prints_without_raw_controls_or_markup_errors(text: str) -> None:
    table = Table("cell")
    table.add_row(text)
    out = _printed(text, table, line(styled(text, "bold"), text))
    assert not any(c in out for c in RAW if c not in "\r\x07\x08"), repr(out)  # rich drops CR, BEL, BS itself


def test_escapes_are_visible_and_markup_is_literal() -> None:
    out = _printed("[/bold]x \x1b[31mred \x9b2J \u202eevil")
    assert "[/bold]x" in out and "\\x1b[31mred" in out and "\\x9b2J" in out and "\\u202eevil" in out
    assert visible("tab\tand\nnewline stay") == "tab\tand\nnewline stay"


def test_an_error_line_is_visible_too(capsys: pytest.CaptureFixture[str]) -> None:
    print_error("bad name '\x1b]0;owned\x07' [/red]")
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "\\x1b]0;owned\\x07' [/red]" in err and "\x1b]" not in err
