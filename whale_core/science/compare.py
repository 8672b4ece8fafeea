"""`whale compare`: the plan of (mode x seed) runs under one budget, and the comparison report built from their results.

A comparison is a list of `Variant`s (a label and a mode; ``whale-fixed-p4`` is ``whale-fixed`` with
``phase.weights = phase.harness = 4`` for the phase-length sweep) times a list of seeds. Every (variant, seed) gets
its own deterministic run id (``<compare id>-<label>-s<seed>``) and the same config apart from ``mode``, ``seed``
and the sweep's phase, so all runs share one budget and one suite (the suite's own seed stays fixed: every run is
tested on the same held-out problems; the run seed moves sampling, demos, proposals and training).

The report's record types (`RunOutcome`, `ModeStats`, `Difference`, `BudgetRow`) live in
`whale_core.science.compare_records`. This module holds no orchestration (``flows/compare.py`` runs the plan); it turns
`RunOutcome`s (one per run, taken from the run summary and the archive's legs) into the report: the bar chart of
held-out test scores (mean ± sample sd over seeds), the training curves (val metric vs rollouts spent, leg switches
marked), the phase-sweep figure (the three drawn by `whale_core.science.figures`), the budget table (completions per leg
kind) and the Markdown that ties them together with the robustness matrix.

Simplified: "WHALE vs baseline" differences come with a standard error (seed spread plus the binomial noise of a score
over ``test_n`` problems, `ModeStats.se`), not a test: with three seeds that is what the numbers support.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from whale_core.errors import WhaleError
from whale_core.legs.costs import leg_costs
from whale_core.science.compare_records import WHALE_MODES, BudgetRow, Difference, ModeStats, RunOutcome
from whale_core.science.efficiency import efficiency_figure, efficiency_markdown
from whale_core.science.robustness import RobustnessConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from whale_core.config import WhaleConfig
    from whale_core.records.archive import Archive
    from whale_core.science.robustness import RobustnessMatrix

ALL_MODES: tuple[str, ...] = ("whale-adaptive", "whale-fixed", "weights-only", "harness-only", "prompt-weights")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


class CompareError(WhaleError, ValueError):
    """A comparison that cannot run as asked (bad id, unknown mode, a resumed run whose config changed)."""


class CompareSpec(BaseModel):
    """What a comparison runs: modes, seeds, the optional phase-length sweep and the robustness matrix."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    modes: list[str] = Field(default_factory=lambda: list(ALL_MODES))
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    sweep_phase: list[int] = Field(default_factory=list, description="whale-fixed phase lengths to sweep")
    matrix: RobustnessConfig = Field(default_factory=RobustnessConfig)

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in ALL_MODES]
        if bad or not v:
            raise ValueError(f"unknown mode(s) {bad or v}; valid: {', '.join(ALL_MODES)} (or 'all')")
        return list(dict.fromkeys(v))

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"seeds must be a non-empty list of distinct ints (got {v})")
        return v

    @field_validator("sweep_phase")
    @classmethod
    def _sweep(cls, v: list[int]) -> list[int]:
        if any(p < 1 or p > 100 for p in v) or len(set(v)) != len(v):
            raise ValueError(f"sweep phase lengths must be distinct ints in 1..100 (got {v})")
        return v


def parse_modes(text: str) -> list[str]:
    """``"all"`` → every mode; ``"whale-adaptive,harness-only"`` → those (validated)."""
    if text.strip() == "all":
        return list(ALL_MODES)
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad or not modes:
        raise CompareError(f"--modes: unknown mode(s) {bad or text!r}; valid: all, {', '.join(ALL_MODES)}")
    return modes


def parse_ints(text: str, what: str) -> list[int]:
    """``"1,2,4,8"`` → ``[1, 2, 4, 8]`` with an error naming ``what``."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CompareError(f"{what}: expected comma-separated integers, got {text!r}") from None


def check_compare_id(compare_id: str) -> str:
    if not _ID.match(compare_id):
        raise CompareError(
            f"compare id {compare_id!r}: use 1-40 letters, digits, '_', '.', '-' (starting with a letter or digit)"
        )
    return compare_id


@dataclass(frozen=True)
class Variant:
    """One bar of the chart: ``label`` (unique), the run ``mode`` and, for the sweep, the fixed phase length."""

    label: str
    mode: str
    phase: int | None = None


def plan_variants(modes: Sequence[str], sweep_phase: Sequence[int] = ()) -> list[Variant]:
    """The variants to run. With a sweep, ``whale-fixed`` runs once per phase length (``whale-fixed-p<N>``) instead
    of once with the config's phase."""
    out = [Variant(m, m) for m in modes if not (m == "whale-fixed" and sweep_phase)]
    out += [Variant(f"whale-fixed-p{p}", "whale-fixed", p) for p in sweep_phase]
    return out


def run_id_for(compare_id: str, variant: Variant, seed: int) -> str:
    return f"{compare_id}-{variant.label}-s{seed}"


def variant_config(base: WhaleConfig, variant: Variant, seed: int) -> WhaleConfig:
    """``base`` with the variant's mode (and sweep phase) and the run seed; everything else, budget included, shared."""
    from whale_core.config import WhaleConfig

    data = base.model_dump(mode="json")
    data["mode"] = variant.mode
    data["seed"] = seed
    if variant.phase is not None:
        data["schedule"]["phase"] = {"weights": variant.phase, "harness": variant.phase}
    return WhaleConfig.model_validate(data)


def check_sweep(cfg: WhaleConfig, sweep_phase: Sequence[int]) -> None:
    """Refuse a phase sweep in which some phase length cannot alternate twice (harness x p → weights x p →
    harness): that takes ``2p + 1`` iterations and about ``p`` weights legs + ``p + 1`` harness legs of budget
    (`leg_costs`). The error names what to raise."""
    if not sweep_phase:
        return
    weights, harness = leg_costs(cfg)
    problems = []
    for p in sorted(sweep_phase):
        if cfg.iterations is not None and cfg.iterations < 2 * p + 1:
            problems.append(f"phase {p} needs iterations ≥ {2 * p + 1} (has {cfg.iterations})")
        need = p * weights + (p + 1) * harness
        if need > cfg.budget.total:
            problems.append(
                f"phase {p} needs about {need:,} completions ({p} weights legs x {weights:,} + {p + 1} harness legs "
                f"x {harness:,}; budget.total is {cfg.budget.total:,})"
            )
    if problems:
        longest = max(sweep_phase)
        raise CompareError(
            "--sweep-phase: each phase length must alternate at least twice (harness x p, weights x p, harness): "
            + "; ".join(problems)
            + f". Raise them (e.g. --set iterations={2 * longest + 1}, or --equal-spend to let the budget end the "
            f"runs, and budget.total ≥ {longest * weights + (longest + 1) * harness:,}) or shorten the legs "
            "(weights.steps)."
        )


def equal_spend_overrides(set_items: Sequence[str], patience: int = 3) -> list[str]:
    """``--set`` items that make every mode spend its whole budget: no iteration cap (``iterations=null``) and a
    no-progress stop of ``patience`` legs unless the user set ``schedule.stop_patience``."""
    items = [*set_items, "iterations=null"]
    if not any(i.split("=", 1)[0].strip() == "schedule.stop_patience" for i in set_items):
        items.append(f"schedule.stop_patience={patience}")
    return items


def config_note(cfg: WhaleConfig, seeds: Sequence[int]) -> str:
    """The report's line on what every run shared."""
    if cfg.iterations is None:
        legs = (
            f"no iteration cap: each run spends its budget or stops after {cfg.schedule.stop_patience} legs without "
            f"a val gain above {cfg.schedule.min_delta} (equal spend)"
        )
    else:
        legs = f"iterations ≤ {cfg.iterations}"
    wording = "" if cfg.search.mutate_wording == "default" else f"; mutate wording `{cfg.search.mutate_wording}`"
    return (
        f"Budget per run: {cfg.budget.total} completions (harness share cap: {cfg.budget.harness_share_cap}); "
        f"{legs}; model `{cfg.model.name}`; suite `{cfg.suite.name}`; seeds {list(seeds)}; test problems per run "
        f"{cfg.rollout.test_problems}{wording}."
    )


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], *, shared_only: bool = False) -> list[str]:
    """Dotted keys whose values differ between two nested configs (sorted). ``shared_only``: ignore keys present on
    one side only (a config section that gained or lost a field between versions of WHALE)."""
    from whale_core.config import flatten

    a, b = flatten(old), flatten(new)
    keys = set(a) & set(b) if shared_only else set(a) | set(b)
    return sorted(k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>"))


# ------------------------------------------------------------------------------------------------------ outcomes
def leg_switches(bounds: Sequence[tuple[float, str]]) -> list[tuple[float, str]]:
    """The leg starts where the kind changes (the first leg counts): ``(rollouts spent, new kind)``."""
    out: list[tuple[float, str]] = []
    for x, kind in bounds:
        if not out or out[-1][1] != kind:
            out.append((x, kind))
    return out


def outcome_from_run(
    archive: Archive, variant: Variant, seed: int, run_id: str, summary: Mapping[str, Any], source: str = "run"
) -> RunOutcome:
    """A finished run's outcome: test scores and budget from its summary, the curve from the archive's legs."""
    from whale_core.science.report import curve_points

    points, bounds = curve_points(archive, run_id, float(summary["val_initial"]))
    return RunOutcome(
        label=variant.label,
        mode=variant.mode,
        seed=seed,
        run_id=run_id,
        status="finished",
        test_final=float(summary["test_final"]),
        test_initial=float(summary["test_initial"]),
        test_n=int(summary["test_n"]),
        budget=dict(summary["budget"]),
        final_harness=summary.get("final_harness"),
        final_checkpoint=summary.get("final_checkpoint"),
        curve=points,
        switches=leg_switches(bounds),
        legs=list(summary.get("legs", [])),
        source=source,
    )


# --------------------------------------------------------------------------------------------------- aggregation
def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for fewer than two values; NaN mean for none)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def aggregate(outcomes: Sequence[RunOutcome]) -> list[ModeStats]:
    """One `ModeStats` per label, in first-seen order."""
    labels = list(dict.fromkeys(o.label for o in outcomes))
    out = []
    for label in labels:
        runs = [o for o in outcomes if o.label == label]
        ok = [o for o in runs if o.ok]
        mean, sd = mean_sd([o.test_final for o in ok if o.test_final is not None])
        init, _ = mean_sd([o.test_initial for o in ok if o.test_initial is not None])
        values = tuple(o.test_final for o in ok if o.test_final is not None)
        test_n = min((o.test_n for o in ok), default=0)
        out.append(ModeStats(label, runs[0].mode, len(ok), len(runs) - len(ok), mean, sd, values, init, test_n))
    return out


def differences(stats: Sequence[ModeStats]) -> list[Difference]:
    """Every WHALE variant (``whale-*``) against every non-WHALE variant with at least one finished seed."""
    whale = [s for s in stats if s.mode in WHALE_MODES and s.n]
    base = [s for s in stats if s.mode not in WHALE_MODES and s.n]
    return [Difference(w.label, b.label, w.mean - b.mean, math.sqrt(w.se**2 + b.se**2)) for w in whale for b in base]


def budget_table(outcomes: Sequence[RunOutcome]) -> list[BudgetRow]:
    """Per label: mean completions per kind, the largest search spend (weights + harness) and harness share."""
    rows = []
    for label in dict.fromkeys(o.label for o in outcomes):
        ok = [o for o in outcomes if o.label == label and o.ok and o.budget]
        if not ok:
            continue
        kinds = [o.budget.get("by_kind", {}) for o in ok]
        spent = [int(k.get("weights", 0)) + int(k.get("harness", 0)) for k in kinds]
        shares = [int(k.get("harness", 0)) / int(o.budget["total"]) for k, o in zip(kinds, ok, strict=True)]
        rows.append(
            BudgetRow(
                label=label,
                n=len(ok),
                weights=statistics.fmean(int(k.get("weights", 0)) for k in kinds),
                harness=statistics.fmean(int(k.get("harness", 0)) for k in kinds),
                eval=statistics.fmean(int(k.get("eval", 0)) for k in kinds),
                total=max(int(o.budget["total"]) for o in ok),
                max_spent=max(spent),
                harness_share=max(shares),
                harness_cap=ok[0].budget.get("harness_share_cap"),
                weights_legs=statistics.fmean(o.legs.count("weights") for o in ok),
                harness_legs=statistics.fmean(o.legs.count("harness") for o in ok),
            )
        )
    return rows


# ------------------------------------------------------------------------------------------------------ markdown
def _pm(mean: float, sd: float, n: int) -> str:
    return f"{mean:.4f} ± {sd:.4f}" if n else "—"


def _verdict(d: Difference, stats: Sequence[ModeStats]) -> str:
    """``higher``/``lower`` only when the difference clears 2 s.e. and both sides have ≥ 2 seeds (else no spread)."""
    n = min(s.n for s in stats if s.label in (d.label, d.baseline))
    if n < 2:
        return "n/a (1 seed: no spread)"
    return "higher" if d.diff > 2 * d.se else ("lower" if d.diff < -2 * d.se else "within 2 s.e.")


def report_markdown(
    compare_id: str,
    outcomes: Sequence[RunOutcome],
    *,
    command: str = "",
    config_note: str = "",
    matrix_md: str = "",
    figures: Mapping[str, str] | None = None,
) -> str:
    """The comparison report (Markdown). ``figures`` maps a caption to a PNG file name next to the report."""
    stats = aggregate(outcomes)
    lines = [f"# WHALE comparison `{compare_id}`", ""]
    if command:
        lines += [f"Reproduce: `{command}`", ""]
    if config_note:
        lines += [config_note, ""]
    lines += ["## Held-out test score per mode", "",
              "| variant | mode | seeds ok | failed | test (mean ± sd) | base (seed harness) | per seed |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for s in stats:
        per_seed = ", ".join(f"{v:.4f}" for v in s.values)
        init = f"{s.initial_mean:.4f}" if s.n else "—"
        lines.append(f"| {s.label} | {s.mode} | {s.n} | {s.failed} | {_pm(s.mean, s.sd, s.n)} | {init} | {per_seed} |")
    diffs = differences(stats)
    if diffs:
        lines += ["", "## WHALE vs each baseline (difference of mean test scores)", "",
                  "| WHALE variant | baseline | difference | s.e. | |", "|---|---|---|---|---|"]  # fmt: skip
        for d in diffs:
            verdict = _verdict(d, stats)
            lines.append(f"| {d.label} | {d.baseline} | {d.diff:+.4f} | {d.se:.4f} | {verdict} |")
    rows = budget_table(outcomes)
    if rows:
        lines += ["", "## Budget spent per leg kind (completions; mean over seeds)", "",
                  "| variant | weights | harness | eval (not charged) | max spent / total | max harness share | cap "
                  "| weights legs | harness legs |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in rows:
            cap = f"{r.harness_cap:.2%}" if r.harness_cap is not None else "none"
            lines.append(
                f"| {r.label} | {r.weights:.0f} | {r.harness:.0f} | {r.eval:.0f} | {r.max_spent} / {r.total} "
                f"| {r.harness_share:.2%} | {cap} | {r.weights_legs:.1f} | {r.harness_legs:.1f} |"
            )
    efficiency = efficiency_markdown(outcomes, stats)
    if efficiency:
        lines += ["", efficiency]
    failed = [o for o in outcomes if not o.ok]
    if failed:
        lines += ["", "## Failed runs", "", "| run | variant | seed | error |", "|---|---|---|---|"]
        for o in failed:
            err = (o.error or o.status).replace("|", "\\|").replace("\n", " ")[:300]
            lines.append(f"| `{o.run_id}` | {o.label} | {o.seed} | {err} |")
    lines += ["", "## Runs", "", "| run | variant | seed | status | legs | from |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| `{o.run_id}` | {o.label} | {o.seed} | {o.status} | {' → '.join(o.legs)} | {o.source} |")
    if matrix_md:
        lines += ["", matrix_md]
    for caption, name in (figures or {}).items():
        lines += ["", f"![{caption}]({name})"]
    lines.append("")
    return "\n".join(lines)


def write_compare_report(
    out_dir: Path,
    compare_id: str,
    outcomes: Sequence[RunOutcome],
    *,
    command: str = "",
    config_note: str = "",
    matrix: RobustnessMatrix | None = None,
) -> dict[str, Path]:
    """Write ``report.md`` and the PNGs (bars, curves, sweep, robustness heatmap) into ``out_dir``; return paths."""
    from whale_core.science.figures import bar_chart, curves_figure, sweep_figure
    from whale_core.science.robustness import heatmap_figure, matrix_markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    stats = aggregate(outcomes)
    figs: dict[str, Figure] = {"test score per mode": bar_chart(stats)}
    if any(o.ok for o in outcomes):
        figs["training curves"] = curves_figure(outcomes)
    sweep = sweep_figure(stats)
    if sweep is not None:
        figs["phase sweep vs adaptive"] = sweep
    eff = efficiency_figure(outcomes, stats)
    if eff is not None:
        figs["score vs completions"] = eff
    if matrix is not None:
        figs["robustness matrix"] = heatmap_figure(matrix)
    names = {"test score per mode": "bars.png", "training curves": "curves.png",
             "phase sweep vs adaptive": "sweep.png", "robustness matrix": "robustness.png",
             "score vs completions": "efficiency.png"}  # fmt: skip
    paths: dict[str, Path] = {}
    for caption, fig in figs.items():
        path = out_dir / names[caption]
        fig.savefig(path)
        paths[names[caption]] = path
    md = report_markdown(
        compare_id,
        outcomes,
        command=command,
        config_note=config_note,
        matrix_md=matrix_markdown(matrix) if matrix is not None else "",
        figures={c: names[c] for c in figs},
    )
    paths["report.md"] = out_dir / "report.md"
    paths["report.md"].write_text(md)
    return paths
