"""The one base class of WHALE's user-facing errors.

`WhaleError` marks an error that is the user's to fix (a bad harness, config key, suite, model path, database URL,
argument) or an environment fault the user must act on (a server that did not start, a full disk), as opposed to a
bug. Its message is complete on one line and names what is wrong and, where there is a choice, the valid values.
The ``whale`` command line catches every `WhaleError` and prints ``error: <message>`` with exit code 2, no
traceback; anything else is a bug and keeps its traceback.

Subclasses keep their historical built-in base too (``HarnessError`` is still a ``ValueError``), so code that caught
the built-in type keeps working.
"""

from __future__ import annotations


class WhaleError(Exception):
    """A user-facing error: the CLI prints ``error: {message}`` and exits 2."""
