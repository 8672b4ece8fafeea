"""The run report: what a WHALE run did, leg by leg, and what it reached on the held-out test split.

Built from the archive (the source of truth) plus the final test evaluations: a Markdown summary with the initial vs
final (model, harness) test scores, a table of legs (kind, decision reason, val score, budget), the harness diff
from the seed to the final incumbent, and the metric-over-rollouts figure with leg boundaries marked. A leg attempt
that a later attempt replaced (``interrupted`` by a crash and resumed, ``superseded`` by ``whale rerun``) is named
under the table, not in it, so a resumed run's report reads like an uninterrupted one's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.records.archive import Archive

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class TestScores:
    initial: float
    final: float
    n: int


# Leg attempts that a later attempt of the same leg replaced: a resumed run's interrupted attempt, a rerun's
# superseded one. They stay in the archive, and the report names them below its table but leaves them out of it.
ATTEMPT_STATUSES = frozenset({"interrupted", "superseded"})


def _num(value: Any) -> str:
    """A metric cell: 4 decimals, or ``–`` where the leg recorded none (a failed leg)."""
    return f"{float(value):.4f}" if isinstance(value, int | float) else "–"


def curve_points(
    archive: Archive, run_id: str, initial_metric: float
) -> tuple[list[tuple[float, float]], list[tuple[float, str]]]:
    """(rollouts spent, val metric) after each finished leg, and (rollouts at leg start, kind) boundaries."""
    points: list[tuple[float, float]] = [(0.0, initial_metric)]
    bounds: list[tuple[float, str]] = []
    spent = 0.0
    for leg in sorted((x for x in archive.legs(run_id) if x.status == "done"), key=lambda x: x.iteration):
        bounds.append((spent, leg.kind))
        spent += leg.budget_used
        points.append((spent, float(leg.metrics.get("val_score", float("nan")))))
    return points, bounds


def write_report(
    archive: Archive,
    run_id: str,
    out_dir: Path,
    *,
    initial_metric: float,
    test: TestScores,
    seed_harness: Any,
    final_harness: Any,
    final_checkpoint: str,
    budget: dict[str, Any],
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``metric_curve.png`` into ``out_dir``; return both paths."""

    run = archive.get_run(run_id)
    points, bounds = curve_points(archive, run_id, initial_metric)
    fig = metric_curve_figure(points, bounds, metric="val score", title=f"WHALE run {run_id} ({run.mode})")
    png = out_dir / "metric_curve.png"
    fig.savefig(png)
    decisions = {(d.iteration, d.kind): d.reason for d in archive.decisions(run_id)}
    lines = [
        f"# WHALE run `{run_id}`",
        "",
        f"mode **{run.mode}**; final checkpoint `{final_checkpoint}`; final harness `{final_harness.sha[:12]}` "
        f"({final_harness.name})",
        "",
        "| | test score | n |",
        "|---|---|---|",
        f"| initial (base model, seed harness) | {test.initial:.4f} | {test.n} |",
        f"| final (trained model, final harness) | {test.final:.4f} | {test.n} |",
        f"| change | {test.final - test.initial:+.4f} | |",
        "",
        "## Legs",
        "",
        "| iter | leg | status | why | val before | val after | completions |",
        "|---|---|---|---|---|---|---|",
    ]
    legs = sorted(archive.legs(run_id), key=lambda x: (x.iteration, x.id))
    for leg in legs:
        if leg.status in ATTEMPT_STATUSES:
            continue
        m = leg.metrics
        why = decisions.get((leg.iteration, "switch")) or decisions.get((leg.iteration, "continue")) or ""
        lines.append(
            f"| {leg.iteration} | {leg.kind} | {leg.status} | {why} | {_num(m.get('val_score_before'))} "
            f"| {_num(m.get('val_score'))} | {leg.budget_used} |"
        )
    attempts = [leg for leg in legs if leg.status in ATTEMPT_STATUSES]
    if attempts:
        lines += [
            "",
            "Earlier attempts, kept in the archive as history: "
            + "; ".join(f"iteration {x.iteration} {x.kind} leg {x.status}" for x in attempts)
            + ".",
        ]
    lines += [
        "",
        f"Budget: {budget}",
        "",
        "## Harness: seed → final",
        "",
        "```diff",
        seed_harness.diff(final_harness) or "(unchanged)",
        "```",
        "",
        "![metric over rollouts](metric_curve.png)",
        "",
    ]
    md = out_dir / "report.md"
    md.write_text("\n".join(lines))
    return md, png


def metric_curve_figure(
    points: Sequence[tuple[float, float]],
    boundaries: Sequence[tuple[float, str]],
    *,
    metric: str = "val metric",
    title: str | None = None,
) -> Figure:
    """The metric over rollouts spent, with a dashed vertical line where each leg starts, labeled by its kind.

    ``points``: (rollouts spent, metric value); ``boundaries``: (rollouts spent when the leg started, ``"weights"``
    or ``"harness"``). Uses the Agg canvas directly (no pyplot state, safe in worker threads).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if points:
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", color="black", linewidth=1.5, markersize=3, label=metric)
    colors = {"weights": "tab:blue", "harness": "tab:orange"}
    seen: set[str] = set()
    for x, kind in boundaries:
        color = colors.get(kind, "tab:gray")
        ax.axvline(x, color=color, linestyle="--", linewidth=1, label=f"{kind} leg" if kind not in seen else None)
        ax.annotate(
            kind,
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
            color=color,
            rotation=90,
            va="top",
        )
        seen.add(kind)
    ax.set_xlabel("rollouts spent (completions)")
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} over rollouts spent")
    ax.grid(alpha=0.3)
    if points or boundaries:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
