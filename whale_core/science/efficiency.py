"""Sample efficiency of a comparison: how many completions each variant spends before its score reaches the best
baseline's final test score, and the score-vs-completions figure (all variants, mean ± sd over seeds).

The target is the best non-WHALE variant's mean final *test* score (weights-only, harness-only, prompt-weights).
A run reaches it at the first point of its curve — the val score after each leg against the completions its legs
had spent (weights + harness, val evaluations included, `whale_core.science.report.curve_points`) — at or above
the target. Simplified, and said so in the report: the curve is on the val split (n = ``rollout.val_problems``, the
only score measured after every leg) while the target is a test score; both estimate the same accuracy on problems
drawn alike, with the binomial noise of their sizes. A run that never reaches the target counts as "not reached"
(its completions are not averaged in).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whale_core.science.compare_records import WHALE_MODES, ModeStats, RunOutcome

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Reach", "efficiency_figure", "efficiency_markdown", "reach_table", "score_at", "target"]


@dataclass(frozen=True)
class Reach:
    """One variant: completions to reach the target in each seed that did (``spent``), out of ``n`` seeds."""

    label: str
    mode: str
    n: int
    spent: tuple[float, ...]

    @property
    def reached(self) -> int:
        return len(self.spent)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.spent) if self.spent else math.nan

    @property
    def sd(self) -> float:
        return statistics.stdev(self.spent) if len(self.spent) > 1 else 0.0


def target(stats: Sequence[ModeStats]) -> tuple[str, float] | None:
    """The best baseline (non-WHALE variant with a finished seed) and its mean final test score; None without one."""
    base = [s for s in stats if s.mode not in WHALE_MODES and s.n]
    if not base:
        return None
    best = max(base, key=lambda s: s.mean)
    return best.label, best.mean


def first_reach(curve: Sequence[tuple[float, float]], threshold: float) -> float | None:
    """Completions spent at the first curve point whose score is ≥ ``threshold`` (None if none is)."""
    return next((x for x, y in curve if not math.isnan(y) and y >= threshold), None)


def reach_table(outcomes: Sequence[RunOutcome], threshold: float) -> list[Reach]:
    """Per label (first-seen order): the completions each finished seed needed to reach ``threshold``."""
    out = []
    for label in dict.fromkeys(o.label for o in outcomes):
        ok = [o for o in outcomes if o.label == label and o.ok and o.curve]
        if not ok:
            continue
        hits = [first_reach(o.curve, threshold) for o in ok]
        out.append(Reach(label, ok[0].mode, len(ok), tuple(h for h in hits if h is not None)))
    return out


def score_at(curve: Sequence[tuple[float, float]], x: float) -> float:
    """The score a run holds after spending ``x`` completions: its last curve point at or before ``x``; a run that
    stopped earlier keeps its final score (it spends nothing more)."""
    y = curve[0][1]
    for px, py in curve:
        if px <= x and not math.isnan(py):
            y = py
    return y


def efficiency_markdown(outcomes: Sequence[RunOutcome], stats: Sequence[ModeStats]) -> str:
    """The report section: the target and, per variant, completions to reach it (mean ± sd over the seeds that
    did) and how many seeds did; empty without a baseline."""
    tgt = target(stats)
    if tgt is None:
        return ""
    label, value = tgt
    lines = [
        "## Sample efficiency (completions to reach the best baseline's final test score)",
        "",
        f"Target: {value:.4f}, the mean final test score of `{label}`. A run reaches it at the first leg after which "
        "its val score (the score measured after every leg) is at or above the target; completions are those its "
        "legs had spent (weights + harness, their val evaluations included). Figure: `efficiency.png`.",
        "",
        "| variant | seeds reached / finished | completions to reach (mean ± sd over those seeds) | per seed |",
        "|---|---|---|---|",
    ]
    for r in reach_table(outcomes, value):
        spent = f"{r.mean:,.0f} ± {r.sd:,.0f}" if r.reached else "not reached"
        per = ", ".join(f"{x:,.0f}" for x in r.spent) or "—"
        lines.append(f"| {r.label} | {r.reached} / {r.n} | {spent} | {per} |")
    return "\n".join(lines)


def efficiency_figure(outcomes: Sequence[RunOutcome], stats: Sequence[ModeStats], points: int = 200) -> Figure | None:
    """Score vs completions spent, one line per variant (mean over seeds, ± sd band), the target as a dashed line."""
    from whale_core.science.figures import COLORS, new_figure

    ok = [o for o in outcomes if o.ok and o.curve]
    if not ok:
        return None
    x_max = max(x for o in ok for x, _ in o.curve) or 1.0
    grid = [x_max * i / (points - 1) for i in range(points)]
    fig = new_figure(7.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    palette = ["tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "black"]
    for i, label in enumerate(dict.fromkeys(o.label for o in ok)):
        runs = [o for o in ok if o.label == label]
        ys = [[score_at(o.curve, x) for o in runs] for x in grid]
        mean = [statistics.fmean(v) for v in ys]
        sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in ys]
        mode = runs[0].mode
        color = COLORS.get(mode, palette[i % len(palette)]) if label == mode else palette[i % len(palette)]
        ax.plot(grid, mean, color=color, linewidth=1.4, label=f"{label} (n={len(runs)})")
        ax.fill_between(grid, [m - s for m, s in zip(mean, sd, strict=True)],
                        [m + s for m, s in zip(mean, sd, strict=True)], color=color, alpha=0.15)  # fmt: skip
    tgt = target(stats)
    if tgt is not None:
        ax.axhline(tgt[1], color="gray", linestyle="--", linewidth=1, label=f"target: {tgt[0]} final test")
    ax.set_xlabel("completions spent (weights + harness legs)")
    ax.set_ylabel("val score after each leg (mean ± sd)")
    ax.set_title("sample efficiency: score vs completions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
