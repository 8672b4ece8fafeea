"""``whale runs``: list the runs in the archive."""

from __future__ import annotations

from whale_cli.common import console
from whale_core.env import setup_offline_env


def runs_cmd() -> None:
    """List the runs in the archive."""
    setup_offline_env()
    from rich.table import Table

    from whale_core.records.archive import Archive

    table = Table("run", "mode", "status", "created")
    for r in Archive().runs():
        table.add_row(r.id, r.mode, r.status, r.created.strftime("%Y-%m-%d %H:%M"))
    console().print(table)
