"""Sections of the run report (`whale_core.science.report`) that read more than the leg table: each harness leg's
leaderboard, the per-step GRPO reward of each weights leg, and the budget as a table.

Where the numbers live: candidates, their statuses and reasons and every (harness, policy) evaluation are archive
rows. The per-step GRPO rewards are *not* in the archive (it keeps a leg's summary metrics only; MLflow's leg runs
hold them as the ``reward`` metric history): each weights leg writes them to ``leg_result.json`` beside its
checkpoint dir, which the archive's checkpoint row points to, so `reward_steps` reads them from there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.records.archive import Archive
from whale_core.science.outputs import ci_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# the order a leaderboard lists statuses in (the winner first)
_STATUS_ORDER = {"accepted": 0, "scored": 1, "lost": 2, "proposed": 3, "interrupted": 4, "rejected": 5}


def _cell(text: str, limit: int = 90) -> str:
    """A Markdown table cell: one line, pipes escaped, at most ``limit`` characters."""
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def leaderboard_lines(archive: Archive, run_id: str, leg: Any) -> list[str]:
    """A harness leg's candidates as a Markdown table: sha12, status, val score on the most problems it was scored
    on (n, 95 % Wilson interval; under the leg's policy), prompt tokens per problem and the reason."""
    best: dict[str, Any] = {}
    for ev in archive.evaluations(run_id, checkpoint_id=leg.checkpoint_in, split="val"):
        if ev.harness_sha not in best or ev.n > best[ev.harness_sha].n:
            best[ev.harness_sha] = ev
    rows = []
    for c in archive.candidates(run_id, leg_id=leg.id):
        got = best.get(c.harness_sha or "")
        rows.append((_STATUS_ORDER.get(c.status, 9), -(got.score if got else -1.0), c.id, c, got))
    lines = [
        "| harness | status | val score | n | 95 % CI | prompt tokens | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, _, _, c, scored in sorted(rows, key=lambda r: r[:3]):
        sha = f"`{c.harness_sha[:12]}`" if c.harness_sha else "(unparsed)"
        score, n, ci = (
            (f"{scored.score:.4f}", str(scored.n), ci_text(scored.score, scored.n)) if scored else ("–", "–", "–")
        )
        toks = f"{c.prompt_tokens_per_problem:.1f}" if c.prompt_tokens_per_problem is not None else "–"
        lines.append(f"| {sha} | {c.status} | {score} | {n} | {ci} | {toks} | {_cell(c.reason)} |")
    return lines


@dataclass(frozen=True)
class LegRewards:
    """One weights leg's per-step GRPO mean reward; ``first_step``: its first step counted over the whole run."""

    iteration: int
    first_step: int
    rewards: list[float]


def reward_steps(archive: Archive, run_id: str, legs: Sequence[Any]) -> tuple[list[LegRewards], list[int]]:
    """Per-step rewards of the done weights legs (from ``leg_result.json`` beside each leg's checkpoint), and the
    iterations whose file is missing (a checkpoint dir deleted or never written)."""
    out: list[LegRewards] = []
    missing: list[int] = []
    step = 0
    for leg in sorted(legs, key=lambda x: x.iteration):
        if leg.kind != "weights" or leg.status != "done" or not leg.checkpoint_out:
            continue
        ckpt = archive.find_checkpoint(leg.checkpoint_out, run_id)  # the run's own copy
        result = Path(ckpt.path).parent / "leg_result.json" if ckpt is not None else None
        try:
            steps = json.loads(result.read_text())["steps"] if result is not None else None
        except (OSError, ValueError, KeyError):
            steps = None
        if not steps:
            missing.append(leg.iteration)
            continue
        rewards = [float(s["reward_mean"]) for s in steps if s.get("reward_mean") is not None]
        out.append(LegRewards(leg.iteration, step + 1, rewards))
        step += len(rewards)
    return out, missing


def reward_curve_figure(legs: Sequence[LegRewards], title: str) -> Figure:
    """The mean GRPO reward at each step, one colour per weights leg, steps counted over the whole run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for leg in legs:
        xs = list(range(leg.first_step, leg.first_step + len(leg.rewards)))
        ax.plot(xs, leg.rewards, linewidth=1, marker=".", markersize=2, label=f"iteration {leg.iteration}")
    ax.set_xlabel("GRPO step (over the run)")
    ax.set_ylabel("mean reward per step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if legs:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def budget_lines(budget: Mapping[str, Any]) -> list[str]:
    """The budget (`Budget.to_dict`) as a Markdown table: spent per kind, the cap that applies to it, and the total."""
    total = int(budget.get("total", 0))
    by_kind = {k: int(v) for k, v in dict(budget.get("by_kind", {})).items()}
    share = budget.get("harness_share_cap")
    harness_cap = f"{int(share * total + 1e-9)} ({share:.0%} of total)" if share is not None else "total (no cap)"
    caps = {"weights": "total", "harness": harness_cap, "eval": "not counted against total"}
    spent = by_kind.get("weights", 0) + by_kind.get("harness", 0)
    lines = ["| kind | completions spent | cap |", "|---|---|---|"]
    lines += [f"| {k} | {by_kind.get(k, 0)} | {caps.get(k, '')} |" for k in ("weights", "harness", "eval")]
    share_of = f"{spent / total:.0%} of {total}" if total else str(total)
    lines.append(f"| **weights + harness** | **{spent}** | total {total} ({share_of} spent) |")
    return lines
