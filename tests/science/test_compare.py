"""The comparison report's math and plumbing on synthetic outcomes: mean ± sd, differences, budget table, the
variant plan (phase sweep), per-run configs, curves from the archive's legs, and the written report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from whale_core.config import WhaleConfig
from whale_core.records.archive import Archive
from whale_core.science.compare import (
    ALL_MODES,
    CompareError,
    CompareSpec,
    RunOutcome,
    Variant,
    aggregate,
    budget_table,
    check_compare_id,
    config_diff,
    differences,
    leg_switches,
    mean_sd,
    outcome_from_run,
    parse_ints,
    parse_modes,
    plan_variants,
    report_markdown,
    run_id_for,
    variant_config,
    write_compare_report,
)
from whale_core.science.robustness import RobustnessMatrix


def _out(
    label: str,
    seed: int,
    score: float | None,
    *,
    mode: str | None = None,
    w: int = 0,
    h: int = 0,
    ev: int = 0,
    total: int = 1000,
    cap: float | None = None,
    legs: list[str] | None = None,
) -> RunOutcome:
    if score is None:
        return RunOutcome(label, mode or label, seed, f"c-{label}-s{seed}", "failed", error="boom")
    return RunOutcome(
        label, mode or label, seed, f"c-{label}-s{seed}", "finished", test_final=score, test_initial=0.1, test_n=100,
        budget={"total": total, "harness_share_cap": cap, "by_kind": {"weights": w, "harness": h, "eval": ev}},
        legs=legs or [], curve=[(0.0, 0.1), (10.0, score)], switches=[(0.0, "harness")],
    )  # fmt: skip


def test_mean_sd_is_sample_sd() -> None:
    mean, sd = mean_sd([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert sd == pytest.approx(0.2)  # ddof 1: sqrt((0.04 + 0 + 0.04) / 2)
    assert mean_sd([0.7]) == (0.7, 0.0)
    assert all(math.isnan(v) for v in mean_sd([]))


def test_aggregate_counts_failures_and_keeps_order() -> None:
    outs = [_out("whale-adaptive", 0, 0.5), _out("whale-adaptive", 1, 0.7), _out("whale-adaptive", 2, None),
            _out("harness-only", 0, 0.3)]  # fmt: skip
    stats = aggregate(outs)
    assert [s.label for s in stats] == ["whale-adaptive", "harness-only"]
    a = stats[0]
    assert (a.n, a.failed) == (2, 1)
    assert a.mean == pytest.approx(0.6)
    assert a.sd == pytest.approx(math.sqrt(0.02))
    assert a.values == (0.5, 0.7)
    assert a.initial_mean == pytest.approx(0.1)


def test_differences_whale_vs_each_baseline_with_standard_error() -> None:
    outs = [_out("whale-adaptive", s, v) for s, v in enumerate([0.5, 0.7])]
    outs += [_out("weights-only", s, v) for s, v in enumerate([0.2, 0.4])]
    outs += [_out("harness-only", 0, None)]  # no finished seed: no comparison row
    diffs = differences(aggregate(outs))
    assert len(diffs) == 1
    d = diffs[0]
    assert (d.label, d.baseline) == ("whale-adaptive", "weights-only")
    assert d.diff == pytest.approx(0.3)
    # seed spread (sd² / n) plus the binomial noise of a score over test_n = 100 problems, per side
    se = math.sqrt(0.02 / 2 + 0.6 * 0.4 / 200 + 0.02 / 2 + 0.3 * 0.7 / 200)
    assert d.se == pytest.approx(se)
    assert f"| whale-adaptive | weights-only | +0.3000 | {se:.4f} | higher |" in report_markdown("c", outs)
    same = aggregate([_out("whale-fixed", s, 0.5) for s in range(3)])[0]
    assert same.sd == 0.0 and same.se == pytest.approx(math.sqrt(0.25 / 300))  # identical seeds are not exact
    close = [_out("whale-fixed", s, v) for s, v in enumerate([0.5, 0.7])]
    close += [_out("weights-only", s, v) for s, v in enumerate([0.45, 0.65])]
    assert "| +0.0500 | 0.1498 | within 2 s.e. |" in report_markdown("c", close)


def test_budget_table_means_worst_case_and_share() -> None:
    outs = [
        _out("whale-fixed", 0, 0.5, w=800, h=10, ev=300, total=1000, cap=0.01, legs=["harness", "weights", "weights"]),
        _out("whale-fixed", 1, 0.6, w=900, h=6, ev=300, total=1000, cap=0.01, legs=["harness", "weights"]),
        _out("whale-fixed", 2, None),
    ]
    (row,) = budget_table(outs)
    assert row.n == 2
    assert (row.weights, row.harness, row.eval) == (850, 8, 300)
    assert row.max_spent == 906 and row.total == 1000 and row.within_budget
    assert row.harness_share == pytest.approx(0.01)
    assert row.harness_cap == 0.01
    assert (row.weights_legs, row.harness_legs) == (1.5, 1.0)
    over = budget_table([_out("x", 0, 0.1, w=1000, h=1, total=1000)])[0]
    assert not over.within_budget


def test_plan_variants_sweep_replaces_plain_fixed() -> None:
    assert [v.label for v in plan_variants(ALL_MODES)] == list(ALL_MODES)
    plan = plan_variants(["whale-adaptive", "whale-fixed", "harness-only"], [1, 4])
    assert [v.label for v in plan] == ["whale-adaptive", "harness-only", "whale-fixed-p1", "whale-fixed-p4"]
    assert plan[-1] == Variant("whale-fixed-p4", "whale-fixed", 4)
    assert run_id_for("cmp1", plan[-1], 2) == "cmp1-whale-fixed-p4-s2"


def test_variant_config_changes_only_mode_seed_and_phase() -> None:
    base = WhaleConfig.model_validate(
        {"mode": "harness-only", "budget": {"total": 1234, "harness_share_cap": 0.02}, "seed": 0}
    )
    cfg = variant_config(base, Variant("whale-fixed-p8", "whale-fixed", 8), 5)
    assert (cfg.mode, cfg.seed) == ("whale-fixed", 5)
    assert (cfg.schedule.phase.weights, cfg.schedule.phase.harness) == (8, 8)
    assert cfg.budget == base.budget and cfg.suite == base.suite
    diff = config_diff(base.model_dump(mode="json"), cfg.model_dump(mode="json"))
    assert diff == ["mode", "schedule.phase.harness", "schedule.phase.weights", "seed"]
    other = variant_config(base, Variant("weights-only", "weights-only"), 0)
    assert other.schedule == base.schedule


def test_parsing_and_validation_errors_name_the_problem() -> None:
    assert parse_modes("all") == list(ALL_MODES)
    assert parse_modes("whale-adaptive, harness-only") == ["whale-adaptive", "harness-only"]
    with pytest.raises(CompareError, match="whale-adptive"):
        parse_modes("whale-adptive")
    assert parse_ints("1,2,4,8", "--sweep-phase") == [1, 2, 4, 8]
    with pytest.raises(CompareError, match="--sweep-phase"):
        parse_ints("1,x", "--sweep-phase")
    assert check_compare_id("cmp-1.a") == "cmp-1.a"
    with pytest.raises(CompareError, match="compare id"):
        check_compare_id("bad id/")
    with pytest.raises(ValidationError, match="seeds"):
        CompareSpec(seeds=[0, 0])
    with pytest.raises(ValidationError, match="phase"):
        CompareSpec(sweep_phase=[0])
    with pytest.raises(ValidationError, match="unknown mode"):
        CompareSpec(modes=["nope"])


def test_leg_switches_marks_kind_changes_only() -> None:
    bounds = [(0.0, "harness"), (10.0, "weights"), (50.0, "weights"), (90.0, "harness"), (95.0, "harness")]
    assert leg_switches(bounds) == [(0.0, "harness"), (10.0, "weights"), (90.0, "harness")]
    assert leg_switches([]) == []


def test_outcome_curve_comes_from_the_archive_legs(tmp_path: Path) -> None:
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    archive.create_run("r", "whale-fixed", {}, run_id="r")
    legs: list[tuple[Any, int, float]] = [("harness", 30, 0.2), ("weights", 500, 0.4), ("weights", 400, 0.5)]
    for i, (kind, used, val) in enumerate(legs):
        leg = archive.start_leg("r", i, kind)
        archive.finish_leg(leg.id, budget_used=used, metrics={"val_score": val})
    failed = archive.start_leg("r", 3, "harness")
    archive.fail_leg(failed.id, "boom", budget_used=7)
    summary = {"val_initial": 0.1, "test_final": 0.45, "test_initial": 0.05, "test_n": 50,
               "budget": {"total": 2000, "by_kind": {"weights": 900, "harness": 30, "eval": 100}},
               "final_harness": "h", "final_checkpoint": "c", "legs": ["harness", "weights", "weights"]}  # fmt: skip
    o = outcome_from_run(archive, Variant("whale-fixed", "whale-fixed"), 0, "r", summary)
    assert o.ok and o.test_final == 0.45
    assert o.curve == [(0.0, 0.1), (30.0, 0.2), (530.0, 0.4), (930.0, 0.5)]
    assert o.switches == [(0.0, "harness"), (30.0, "weights")]


def _matrix() -> RobustnessMatrix:
    return RobustnessMatrix(["base", "whale-fixed/s0"], ["seed", "final:x", "heldout-para1"],
                            ["seed", "final", "heldout"], [[0.1, 0.0, 0.1], [0.2, 0.8, 0.3]], [0, 1], 20)  # fmt: skip


def test_write_compare_report_files_and_numbers(tmp_path: Path) -> None:
    outs = [_out("whale-adaptive", 0, 0.5, w=900, h=9, total=1000, legs=["harness", "weights"]),
            _out("whale-adaptive", 1, 0.7, w=950, h=9, total=1000, legs=["harness", "weights"]),
            _out("whale-fixed-p2", 0, 0.4, mode="whale-fixed", w=990, h=9, total=1000),
            _out("whale-fixed-p4", 0, 0.45, mode="whale-fixed", w=990, h=9, total=1000),
            _out("weights-only", 0, 0.3, w=999, total=1000), _out("harness-only", 0, None)]  # fmt: skip
    paths = write_compare_report(tmp_path, "cmpX", outs, command="whale compare --id cmpX", matrix=_matrix())
    assert set(paths) == {"bars.png", "curves.png", "sweep.png", "robustness.png", "efficiency.png", "report.md"}
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 100
    md = paths["report.md"].read_text()
    assert "Reproduce: `whale compare --id cmpX`" in md
    assert "| whale-adaptive | whale-adaptive | 2 | 0 | 0.6000 ± 0.1414 |" in md
    assert "| whale-adaptive | weights-only | +0.3000 |" in md and "| n/a (1 seed: no spread) |" in md
    assert "| harness-only | harness-only | 0 | 1 | — |" in md
    assert "## Failed runs" in md and "boom" in md
    assert "| whale-fixed/s0 | 0.8000 | 0.2500 | 0.5500 | 0.3000 |" in md  # own, cross, drop, held-out
    assert md.count("(robustness.png)") == 1


def test_report_without_finished_runs_still_renders() -> None:
    md = report_markdown("c", [_out("weights-only", 0, None)])
    assert "| weights-only | weights-only | 0 | 1 | — |" in md
    assert "Budget spent" not in md


def test_config_diff_shared_only_ignores_fields_added_or_removed() -> None:
    old = {"weights": {"learning_rate": 5e-5, "steps": 50}}
    new = {"weights": {"learning_rate": 5e-5, "steps": 50, "scale_rewards": "group"}}
    assert config_diff(old, new) == ["weights.scale_rewards"]
    assert config_diff(old, new, shared_only=True) == []
    changed = {"weights": {"learning_rate": 2e-4, "steps": 50, "scale_rewards": "group"}}
    assert config_diff(old, changed, shared_only=True) == ["weights.learning_rate"]


def test_existing_compare_id_resumes_with_its_stored_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from flows.compare import compare_dir, resolve_config

    monkeypatch.setenv("WHALE_HOME", str(tmp_path))
    fresh = WhaleConfig.model_validate({"budget": {"total": 999}})
    request = {"config": None, "set": ["budget.total=999"]}
    assert resolve_config("new", fresh, request) is fresh
    stored = fresh.model_dump(mode="json")
    stored["weights"]["learning_rate"] = 1e-5  # an older default
    stored["weights"].pop("scale_rewards", None)  # a field a newer version added
    compare_dir("old").mkdir(parents=True)
    (compare_dir("old") / "compare.json").write_text(json.dumps({"config": stored, "request": request}))
    resumed = resolve_config("old", fresh, request)
    assert resumed.weights.learning_rate == 1e-5 and resumed.budget.total == 999
    with pytest.raises(CompareError, match="other options"):
        resolve_config("old", fresh, {"config": None, "set": ["budget.total=5"]})
