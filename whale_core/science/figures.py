"""The figures of a `whale compare` report: held-out test score per mode (bars), training curves with leg
switches, and the phase-length sweep against adaptive scheduling. Pure matplotlib on the Agg canvas (no pyplot
state, safe in Prefect's worker threads); `whale_core.science.compare.write_compare_report` saves them next to the
Markdown."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from whale_core.science.compare_records import ModeStats, RunOutcome

__all__ = ["bar_chart", "curves_figure", "sweep_figure"]


def _figure(w: float, h: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


_COLORS = {
    "whale-adaptive": "tab:red",
    "whale-fixed": "tab:orange",
    "weights-only": "tab:blue",
    "harness-only": "tab:green",
    "prompt-weights": "tab:purple",
}
COLORS = _COLORS  # one color per mode, shared with `whale_core.science.efficiency`
new_figure = _figure


def bar_chart(stats: Sequence[ModeStats], title: str = "held-out test score") -> Figure:
    """Mean test score per variant with ± sd error bars, every seed as a dot, the base score as a dashed line."""
    fig = _figure(max(5.0, 1.2 * len(stats) + 2), 4)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(stats)))
    means = [s.mean if s.n else 0.0 for s in stats]
    ax.bar(xs, means, yerr=[s.sd if s.n else 0.0 for s in stats], capsize=4,
           color=[_COLORS.get(s.mode, "tab:gray") for s in stats], alpha=0.8)  # fmt: skip
    for x, s in zip(xs, stats, strict=True):
        ax.scatter([x] * len(s.values), s.values, color="black", s=10, zorder=3)
        top = max([means[x] + (s.sd if s.n else 0.0), *s.values])  # above the error bar and the seed dots
        ax.annotate(f"{s.mean:.3f}" if s.n else "failed", (x, top), xytext=(0, 4), textcoords="offset points",
                    ha="center", fontsize=8)  # fmt: skip
    ax.set_ylim(0, max([1e-3, *(m + (s.sd if s.n else 0.0) for m, s in zip(means, stats, strict=True))]) * 1.2)
    inits = [s.initial_mean for s in stats if s.n]
    if inits:
        ax.axhline(statistics.fmean(inits), color="gray", linestyle="--", linewidth=1, label="base model, seed harness")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xticks(xs, [s.label for s in stats], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("test score (mean ± sd over seeds)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def curves_figure(outcomes: Sequence[RunOutcome]) -> Figure:
    """One panel per variant: val metric vs rollouts spent for each seed; markers where a leg phase starts
    (▲ weights, ● harness), so plateau-triggered switches are visible."""
    labels = list(dict.fromkeys(o.label for o in outcomes if o.ok))
    cols = min(3, max(1, len(labels)))
    rows = max(1, math.ceil(len(labels) / cols))
    fig = _figure(4.5 * cols, 3.2 * rows)
    marks = {"weights": ("^", "tab:blue"), "harness": ("o", "tab:orange")}
    ys_all = [y for o in outcomes if o.ok for _, y in o.curve if not math.isnan(y)]
    pad = 0.05 * ((max(ys_all) - min(ys_all)) if ys_all else 1.0) or 0.05
    ylim = (min(ys_all) - pad, max(ys_all) + pad) if ys_all else None
    for i, label in enumerate(labels):
        ax = fig.add_subplot(rows, cols, i + 1)
        seen: set[str] = set()
        for o in (o for o in outcomes if o.label == label and o.ok):
            if not o.curve:
                continue
            xs, ys = zip(*o.curve, strict=True)
            ax.plot(
                xs, ys, linewidth=1.2, alpha=0.8, color="black", linestyle=_DASHES[o.seed % 3], label=f"seed {o.seed}"
            )
            for x, kind in o.switches:
                y = _value_at(o.curve, x)
                marker, color = marks.get(kind, ("s", "tab:gray"))
                ax.scatter([x], [y], marker=marker, color=color, s=30, zorder=3,
                           label=f"→ {kind} leg" if kind not in seen else None)  # fmt: skip
                seen.add(kind)
        if ylim is not None:
            ax.set_ylim(*ylim)  # one scale for all panels, so modes compare at a glance
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("rollouts spent", fontsize=8)
        ax.set_ylabel("val score", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig


_DASHES = ("-", "--", ":")


def _value_at(curve: Sequence[tuple[float, float]], x: float) -> float:
    """The metric at the last point at or before ``x`` (where the next leg started)."""
    y = curve[0][1]
    for px, py in curve:
        if px <= x:
            y = py
    return y


def sweep_figure(stats: Sequence[ModeStats]) -> Figure | None:
    """Test score vs whale-fixed phase length, with whale-adaptive as a band (mean ± sd); None without a sweep."""
    sweep = sorted(((int(s.label.rsplit("-p", 1)[1]), s) for s in stats if s.label.startswith("whale-fixed-p")),
                   key=lambda t: t[0])  # fmt: skip
    sweep = [(p, s) for p, s in sweep if s.n]
    if not sweep:
        return None
    fig = _figure(5.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    ps = [p for p, _ in sweep]
    ax.errorbar(ps, [s.mean for _, s in sweep], yerr=[s.sd for _, s in sweep], marker="o", capsize=4,
                color=_COLORS["whale-fixed"], label="whale-fixed (phase = p)")  # fmt: skip
    adaptive = next((s for s in stats if s.label == "whale-adaptive" and s.n), None)
    if adaptive is not None:
        ax.axhline(adaptive.mean, color=_COLORS["whale-adaptive"], label="whale-adaptive")
        ax.axhspan(adaptive.mean - adaptive.sd, adaptive.mean + adaptive.sd, color=_COLORS["whale-adaptive"],
                   alpha=0.15)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_xlabel("phase length p (legs per phase, both legs)")
    ax.set_ylabel("test score (mean ± sd)")
    ax.set_title("fixed phase-length sweep vs adaptive")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
