"""The one rule for a run's id: what ``--run-id``, ``whale resume RUN`` and ``whale rerun RUN`` accept.

A run id names a directory (``$WHALE_HOME/runs/<id>``), an archive row, MLflow runs and tags, a Prefect flow run and
the prompt ``<id>-harness``; so it is a single, safe path component of at most `MAX_LEN` characters: letters, digits,
``_``, ``.`` and ``-``, starting with a letter or a digit (no ``/``, no ``..``, no quotes, no brackets, no spaces).
Checked before anything is created.
"""

from __future__ import annotations

import re

from whale_core.errors import WhaleError

MAX_LEN = 100
_RUN_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_LEN - 1}}}")


class RunIdError(WhaleError, ValueError):
    """A run id that breaks the rule (the message says which part and shows the id literally)."""


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a valid run id (see the module docstring), else `RunIdError`."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        shown = repr(run_id if len(run_id) <= 60 else run_id[:57] + "...")
        why = f"longer than {MAX_LEN} characters" if len(run_id) > MAX_LEN else "not a plain name"
        raise RunIdError(
            f"run id {shown} is {why}: use 1-{MAX_LEN} letters, digits, '_', '.' or '-', starting with a letter or "
            "a digit (no '/', '..', spaces or quotes)"
        )
    return run_id
