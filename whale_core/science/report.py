"""The run report: what a WHALE run did, leg by leg, and what it reached on the held-out test split.

Built from the archive (the source of truth) plus the final test evaluations: a Markdown summary with the ready
outputs (final harness file, final adapter, the ``whale eval`` line that reproduces the final test score), the initial
vs final (model, harness) test scores with 95 % intervals (`whale_core.science.outputs.wilson`), a table of legs
(kind, decision reason, val score, budget), each harness leg's leaderboard, the budget as a table, the harness diff
from the seed to the final incumbent, the metric-over-rollouts figure with leg boundaries and the two test points,
and the per-step GRPO reward figure (`whale_core.science.report_sections`). A leg attempt that a later attempt
replaced (``interrupted`` by a crash and resumed, ``superseded`` by ``whale rerun``) is named under the table, not in
it, so a resumed run's report reads like an uninterrupted one's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.records.archive import Archive
from whale_core.science.outputs import RunOutputs, ci_text
from whale_core.science.report_sections import budget_lines, leaderboard_lines, reward_curve_figure, reward_steps

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class TestScores:
    """Test scores of the initial and the final pair (the best by val the run visited) and, when the last pair (the
    one its last leg ended with) is neither, of the last; ``final_note`` says which pair is final and why."""

    initial: float
    final: float
    n: int
    last: float | None = None
    final_note: str = ""


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
    outputs: RunOutputs | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md``, ``metric_curve.png`` and (with a weights leg) ``reward_curve.png`` into ``out_dir``;
    return the first two paths."""

    run = archive.get_run(run_id)
    points, bounds = curve_points(archive, run_id, initial_metric)
    end = points[-1][0] if points else 0.0
    fig = metric_curve_figure(
        points,
        bounds,
        metric="val score",
        title=f"WHALE run {run_id} ({run.mode})",
        tests=[(0.0, test.initial, "test, initial"), (end, test.final, "test, final")],
    )
    png = out_dir / "metric_curve.png"
    fig.savefig(png)
    decisions = {(d.iteration, d.kind): d.reason for d in archive.decisions(run_id)}
    val_n = int(run.config.get("rollout", {}).get("val_problems", 0) or 0)
    lines = [
        f"# WHALE run `{run_id}`",
        "",
        f"mode **{run.mode}**; final checkpoint `{final_checkpoint}`; final harness `{final_harness.sha[:12]}` "
        f"({final_harness.name})",
        "",
        *_outputs_lines(outputs),
        "| | test score | n | 95 % CI (Wilson) |",
        "|---|---|---|---|",
        f"| initial (base model, seed harness) | {test.initial:.4f} | {test.n} | {ci_text(test.initial, test.n)} |",
        f"| final (trained model, final harness) | {test.final:.4f} | {test.n} | {ci_text(test.final, test.n)} |",
        *(
            [f"| last (the pair the last leg ended with) | {test.last:.4f} | {test.n} | {ci_text(test.last, test.n)} |"]
            if test.last is not None
            else []
        ),
        f"| change | {test.final - test.initial:+.4f} | | |",
        "",
        *([test.final_note, ""] if test.final_note else []),
        "## Legs",
        "",
        f"Val scores on the run's first {val_n or '?'} val problems; 95 % Wilson intervals.",
        "",
        "| iter | leg | status | why | val before | val after | 95 % CI after | completions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    legs = sorted(archive.legs(run_id), key=lambda x: (x.iteration, x.id))
    for leg in legs:
        if leg.status in ATTEMPT_STATUSES:
            continue
        m = leg.metrics
        why = decisions.get((leg.iteration, "switch")) or decisions.get((leg.iteration, "continue")) or ""
        after = m.get("val_score")
        ci = ci_text(float(after), val_n) if isinstance(after, int | float) else "–"
        lines.append(
            f"| {leg.iteration} | {leg.kind} | {leg.status} | {why} | {_num(m.get('val_score_before'))} "
            f"| {_num(after)} | {ci} | {leg.budget_used} |"
        )
    attempts = [leg for leg in legs if leg.status in ATTEMPT_STATUSES]
    if attempts:
        lines += [
            "",
            "Earlier attempts, kept in the archive as history: "
            + "; ".join(f"iteration {x.iteration} {x.kind} leg {x.status}" for x in attempts)
            + ".",
        ]
    for leg in legs:
        if leg.kind == "harness" and leg.status not in ATTEMPT_STATUSES:
            lines += ["", f"## Leaderboard, iteration {leg.iteration} (harness leg)", ""]
            lines += leaderboard_lines(archive, run_id, leg)
            lines += proposer_lines(leg.metrics)
    lines += ["", "## Budget", "", *budget_lines(budget)]
    lines += _reward_lines(archive, run_id, legs, out_dir)
    lines += [
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


def proposer_lines(metrics: dict[str, Any]) -> list[str]:
    """The harness leg's proposer spend (its ``proposer_*`` metrics), one line; none for offline proposers."""
    from whale_core.proposers.spend import usage_line

    usage = {k.removeprefix("proposer_"): float(v) for k, v in metrics.items() if k.startswith("proposer_")}
    return ["", f"Proposer: {usage_line(usage)}."] if usage.get("requests") else []


def _outputs_lines(outputs: RunOutputs | None) -> list[str]:
    if outputs is None:
        return []
    adapter = f"`{outputs.adapter}`" if outputs.adapter else "none (the final policy is the base model)"
    return [
        "## Outputs",
        "",
        f"- final harness: `{outputs.harness_file}`",
        f"- final adapter: {adapter}",
        "- reproduce the final test score:",
        "",
        "```bash",
        outputs.reproduce,
        "```",
        "",
    ]


def _reward_lines(archive: Archive, run_id: str, legs: Sequence[Any], out_dir: Path) -> list[str]:
    """The per-step GRPO reward section, with ``reward_curve.png`` when a weights leg recorded its steps."""
    found, missing = reward_steps(archive, run_id, [x for x in legs if x.status not in ATTEMPT_STATUSES])
    if not found and not missing:
        return []
    lines = ["", "## GRPO reward per step", ""]
    if found:
        reward_curve_figure(found, f"GRPO mean reward per step, run {run_id}").savefig(out_dir / "reward_curve.png")
        lines += [
            "![GRPO reward per step](reward_curve.png)",
            "",
            "| iteration | steps | reward, first step | reward, last step | mean over steps |",
            "|---|---|---|---|---|",
        ]
        for x in found:
            r = x.rewards
            mean = sum(r) / len(r) if r else float("nan")
            lines.append(
                f"| {x.iteration} | {len(r)} | {_num(r[0] if r else None)} | {_num(r[-1] if r else None)} "
                f"| {_num(mean)} |"
            )
    if missing:
        lines += ["", f"No per-step record (leg_result.json) for iteration(s) {', '.join(map(str, missing))}."]
    return lines


def metric_curve_figure(
    points: Sequence[tuple[float, float]],
    boundaries: Sequence[tuple[float, str]],
    *,
    metric: str = "val metric",
    title: str | None = None,
    tests: Sequence[tuple[float, float, str]] = (),
) -> Figure:
    """The metric over rollouts spent, with a dashed vertical line where each leg starts, labeled by its kind.

    ``points``: (rollouts spent, metric value); ``boundaries``: (rollouts spent when the leg started, ``"weights"``
    or ``"harness"``); ``tests``: (rollouts spent, test score, label) points drawn as distinct markers (the initial
    and final test scores). Uses the Agg canvas directly (no pyplot state, safe in worker threads).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if points:
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", color="black", linewidth=1.5, markersize=3, label=metric)
    for (x, y, label), marker in zip(tests, ("s", "D", "^", "v"), strict=False):
        ax.plot([x], [y], marker=marker, linestyle="none", color="tab:red", markersize=7, label=label)
        ax.annotate(f"{y:.3f}", (x, y), xytext=(5, -3), textcoords="offset points", fontsize=8, color="tab:red")
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
    if points or boundaries or tests:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
