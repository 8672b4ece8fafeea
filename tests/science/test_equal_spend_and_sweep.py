"""The science options of `whale compare` (issue 21) on synthetic inputs: a run with no iteration cap (equal spend;
its no-progress stop and the share-cap redirect: tests/ascent/test_decider.py), the sweep's validation (every
phase length alternates at least twice, in iterations and in budget), a share cap at large budgets, the sample-
efficiency table and figure. The coupling check's wording: tests/proposers/test_mutate_wording.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from whale_core.config import ConfigError, WhaleConfig, load_config
from whale_core.legs.budget import Budget
from whale_core.legs.costs import leg_costs
from whale_core.science.compare import (
    CompareError,
    RunOutcome,
    aggregate,
    check_sweep,
    config_note,
    equal_spend_overrides,
    write_compare_report,
)
from whale_core.science.efficiency import efficiency_markdown, first_reach, reach_table, score_at, target


def test_iterations_null_needs_a_stop_rule_and_the_error_names_the_keys() -> None:
    with pytest.raises(ConfigError, match=r"iterations: null .*schedule\.stop_patience"):
        load_config(overrides=["iterations=null"])
    cfg = load_config(overrides=["iterations=null", "schedule.stop_patience=3"])
    assert cfg.iterations is None and cfg.max_legs == 1000
    assert load_config().max_legs == 4
    with pytest.raises(ConfigError, match="stop_patience"):
        load_config(overrides=["schedule.stop_patience=0"])


def test_equal_spend_overrides_keep_a_users_own_patience() -> None:
    assert equal_spend_overrides(["seed=1"]) == ["seed=1", "iterations=null", "schedule.stop_patience=3"]
    own = equal_spend_overrides(["schedule.stop_patience=5"])
    assert own == ["schedule.stop_patience=5", "iterations=null"]
    cfg = load_config(overrides=equal_spend_overrides([]))
    note = config_note(cfg, [0, 1, 2])
    assert "no iteration cap" in note and "3 legs" in note and "equal spend" in note


# ------------------------------------------------------------------------------------------------ share cap
@pytest.mark.parametrize("total", [100_000, 250_000, 1_000_000])
def test_one_percent_cap_at_large_budgets_allows_a_harness_leg(total: int) -> None:
    bud = Budget(total, 0.01)
    assert bud.harness_cap == total // 100
    _, harness = leg_costs(WhaleConfig())
    # the default harness leg (8 candidates, rounds 40/100/200) costs ~1.2k: a scoring budget of 1,000 still covers
    # the incumbent and the halving rounds (the Scorer stops there), 2,500 the whole leg
    assert bud.remaining("harness") >= min(harness, 1000)
    bud.charge("harness", bud.remaining("harness"))
    assert bud.remaining("harness") == 0 and bud.remaining("weights") == total - total // 100


# ------------------------------------------------------------------------------------------------------ sweep
def test_leg_costs_follow_the_config() -> None:
    w, h = leg_costs(WhaleConfig())
    assert w == 300 * 64 + 200
    assert h == 200 + 8 * 40 + 4 * 60 + 2 * 100 + 200  # incumbent; 8 candidates, then 4, then 2; a winner's val
    w2, _ = leg_costs(load_config(overrides=["weights.steps=10", "weights.difficulty_filter={max_problems: 50}"]))
    assert w2 == 10 * 64 + 200 + 50 * 8


def test_sweep_needs_iterations_and_budget_for_two_alternations() -> None:
    cfg = WhaleConfig()  # iterations 4, budget 45,000, weights legs of 19,400
    with pytest.raises(CompareError) as err:
        check_sweep(cfg, [1, 2, 4, 8])
    msg = str(err.value)
    assert "phase 2 needs iterations ≥ 5 (has 4)" in msg and "phase 8 needs iterations ≥ 17" in msg
    assert "phase 4 needs about" in msg and "budget.total is 45,000" in msg and "--set iterations=17" in msg
    check_sweep(cfg, [1])  # H W H: 3 legs, 1 weights + 2 harness legs fit
    check_sweep(cfg, [])
    ok = load_config(
        overrides=["iterations=17", "weights.steps=40", "budget.total=40000"]
    )  # the sweep docs/results.md ran
    check_sweep(ok, [1, 2, 4, 8])
    spend = load_config(overrides=[*equal_spend_overrides([]), "weights.steps=40", "budget.total=40000"])
    check_sweep(spend, [1, 2, 4, 8])  # no iteration cap: only the budget is checked
    with pytest.raises(
        CompareError,
        match=r"phase 16 needs about 63,880 completions \(16 weights legs x 2,760 \+ 17 harness legs x 1,160",
    ):
        check_sweep(load_config(overrides=[*equal_spend_overrides([]), "weights.steps=40"]), [8, 16])


# ------------------------------------------------------------------------------------------ sample efficiency
def _run(label: str, seed: int, final: float, curve: list[tuple[float, float]], mode: str | None = None) -> RunOutcome:
    return RunOutcome(
        label, mode or label, seed, f"c-{label}-s{seed}", "finished", test_final=final, test_initial=0.06,
        test_n=500, budget={"total": 1000, "by_kind": {}}, curve=curve,
    )  # fmt: skip


def test_completions_to_reach_the_best_baseline(tmp_path: Path) -> None:
    outs = [
        _run("whale-fixed", 0, 0.50, [(0, 0.07), (1200, 0.385), (20000, 0.47)]),
        _run("whale-fixed", 1, 0.48, [(0, 0.04), (1500, 0.30), (3000, 0.39), (22000, 0.46)]),
        _run("harness-only", 0, 0.37, [(0, 0.07), (1300, 0.385), (2600, 0.385)]),
        _run("harness-only", 1, 0.33, [(0, 0.04), (1400, 0.345)]),
        _run("weights-only", 0, 0.06, [(0, 0.07), (19000, 0.06)]),
    ]
    stats = aggregate(outs)
    assert target(stats) == ("harness-only", pytest.approx(0.35))
    assert first_reach(outs[0].curve, 0.35) == 1200 and first_reach(outs[4].curve, 0.35) is None
    rows = {r.label: r for r in reach_table(outs, 0.35)}
    assert rows["whale-fixed"].spent == (1200, 3000) and rows["whale-fixed"].mean == 2100
    assert rows["weights-only"].reached == 0 and math.isnan(rows["weights-only"].mean)
    assert score_at(outs[0].curve, 1199) == 0.07 and score_at(outs[0].curve, 10**6) == 0.47
    md = efficiency_markdown(outs, stats)
    assert "Target: 0.3500" in md and "| whale-fixed | 2 / 2 | 2,100 ± 1,273 |" in md
    assert "| weights-only | 0 / 1 | not reached |" in md
    paths = write_compare_report(tmp_path, "eff", outs)
    assert paths["efficiency.png"].stat().st_size > 5000
    assert "![score vs completions](efficiency.png)" in paths["report.md"].read_text()


def test_no_baseline_no_efficiency_section() -> None:
    outs = [_run("whale-fixed", 0, 0.5, [(0, 0.1), (10, 0.5)])]
    assert efficiency_markdown(outs, aggregate(outs)) == ""
