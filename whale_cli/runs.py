"""``whale runs``: the runs in the archive, with their scores and durations.

Fast on purpose (no torch, MLflow or Prefect import): everything comes from the archive, except the test scores of a
run whose archive holds no test evaluation, which come from the run's ``summary.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from whale_cli.common import console
from whale_core.env import setup_offline_env


def _arrow(a: float | None, b: float | None) -> str:
    if a is None and b is None:
        return "–"
    f = lambda x: "?" if x is None else f"{x:.3f}"  # noqa: E731
    return f"{f(a)} → {f(b)}"


def _duration(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600} h {s % 3600 // 60:02d} m" if s >= 3600 else f"{s // 60} m {s % 60:02d} s"


def run_row(archive: Any, run: Any, home: Path) -> dict[str, Any]:
    """One run's row: val initial/final from its done legs, test initial/final (archive, else summary.json),
    the number of legs and the time from creation to the last update."""
    legs = sorted((x for x in archive.legs(run.id) if x.status == "done"), key=lambda x: (x.iteration, x.id))
    val0 = legs[0].metrics.get("val_score_before") if legs else None
    val1 = legs[-1].metrics.get("val_score") if legs else None
    tests = archive.evaluations(run.id, split="test")
    test0, test1 = (tests[0].score, tests[-1].score) if len(tests) >= 2 else (None, None)
    summary = home / "runs" / run.id / "summary.json"
    if test0 is None and summary.is_file():
        try:
            data = json.loads(summary.read_text())
            test0, test1 = data.get("test_initial"), data.get("test_final")
            val0 = val0 if val0 is not None else data.get("val_initial")
        except (OSError, ValueError):
            pass
    return {
        "id": run.id,
        "mode": run.mode,
        "status": run.status,
        "created": run.created.strftime("%Y-%m-%d %H:%M"),
        "duration": _duration((run.updated - run.created).total_seconds()),
        "val": _arrow(val0, val1),
        "test": _arrow(test0, test1),
        "legs": len(legs),
    }


def runs_cmd() -> None:
    """List the runs in the archive: mode, status, when, how long, val and test score initial → final, legs."""
    home = setup_offline_env()
    from rich.table import Table

    from whale_core.records.archive import Archive

    archive = Archive()
    runs = archive.runs()
    con = console()
    if not runs:
        con.print(f"No runs yet in {archive.safe_url}: start one with `whale run`.")
        return
    from rich.table import Column

    if not con.is_terminal:  # piped or in a file: the whole table, not rich's 80-column default
        con.width = max(con.width, 160)
    # a run id is what `whale resume` takes: never cut it; the other cells wrap on a narrow terminal
    table = Table(
        Column("run", no_wrap=True), Column("mode", no_wrap=True), "status", "created", "duration", "val", "test",
        "legs",
    )  # fmt: skip
    for r in runs:
        row = run_row(archive, r, home)
        table.add_row(*(str(row[k]) for k in ("id", "mode", "status", "created", "duration", "val", "test", "legs")))
    con.print(table)
