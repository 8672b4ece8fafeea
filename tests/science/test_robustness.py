"""The robustness (co-overfitting) matrix: test-split problems only, the harness set (top-k, finals, held-out never
seen in training), the per-model summary math, and a real in-process matrix on the micro model (the population
of the mitigation: tests/legs/test_population.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.legs.population import (
    best_val_harnesses,
    input_signature,
    probe_of,
)
from whale_core.records.archive import Archive
from whale_core.science.robustness import (
    MatrixHarness,
    MatrixModel,
    RobustnessConfig,
    RobustnessMatrix,
    compute_matrix,
    harness_set,
    heatmap_figure,
    heldout_harnesses,
    matrix_markdown,
    matrix_problems,
    rollout_evaluate,
)
from whale_core.suites import SuiteConfig, load_suite


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite(SuiteConfig(name="arith", sizes={"train": 60, "val": 30, "test": 40}))


@pytest.fixture(scope="module")
def seed_h(suite: Any) -> Harness:
    return Harness.from_text(suite.seed_harness)


def _variant(h: Harness, instruction: str) -> Harness:
    return h.evolve(instruction=instruction)


def _parse_only(h: Harness) -> Harness:
    """Same inputs to the model, another sha: one more (no-op) parse step."""
    steps = [step.model_dump(by_alias=True, exclude_none=True) for step in h.spec.parse]
    return h.evolve(parse=[*steps, {"int": True}])


def test_matrix_is_scored_on_test_split_problems_only(suite: Any, seed_h: Harness) -> None:
    seen: list[str] = []

    def spy(model: MatrixModel, harness: MatrixHarness, problems: list[Any]) -> float:
        seen.extend(p.id for p in problems)
        return 0.5

    cols = [MatrixHarness("seed", "seed", seed_h), MatrixHarness("v", "heldout", _variant(seed_h, "Sum."))]
    models = [MatrixModel("base", None, object(), seed_h.sha), MatrixModel("m", "r", object(), "nope")]
    m = compute_matrix(models, cols, suite, 25, spy)
    test_ids = {p.id for p in suite.problems("test")}
    other_ids = {p.id for split in ("train", "val") for p in suite.problems(split)}
    assert len(seen) == 2 * 2 * 25
    assert set(seen) <= test_ids and not set(seen) & other_ids
    assert set(seen) == {p.id for p in list(suite.problems("test"))[:25]}
    assert m.n == 25 and m.own == [0, None]


def test_matrix_problems_refuses_a_leaking_split(suite: Any) -> None:
    class Leaky:
        def problems(self, split: str) -> list[Any]:
            return list(suite.problems("val" if split == "test" else split))

    with pytest.raises(AssertionError, match="also appear in train/val"):
        matrix_problems(Leaky(), 5)
    assert len(matrix_problems(suite, 1000)) == 40


def test_summary_own_cross_drop_heldout() -> None:
    m = RobustnessMatrix(["a", "b"], ["s", "f", "h1", "h2"], ["seed", "final", "heldout", "heldout"],
                         [[0.5, 0.1, 0.3, 0.1], [0.2, 0.9, 0.4, 0.0]], [0, 1], 10)  # fmt: skip
    a, b = m.summary()
    assert a.own == 0.5 and a.cross == pytest.approx(0.5 / 3) and a.drop == pytest.approx(0.5 - 0.5 / 3)
    assert b.own == 0.9 and b.cross == pytest.approx(0.2) and b.drop == pytest.approx(0.7)
    assert a.heldout == pytest.approx(0.2) and b.heldout == pytest.approx(0.2)
    no_own = RobustnessMatrix(["c"], ["s", "h"], ["seed", "heldout"], [[0.2, 0.4]], [None], 10)
    (c,) = no_own.summary()
    assert c.own is None and c.drop is None and c.cross == pytest.approx(0.3)
    md = matrix_markdown(m)
    assert "| b | 0.9000 | 0.2000 | 0.7000 | 0.2000 |" in md
    assert heatmap_figure(m).axes


def test_heldout_harnesses_are_new_distinct_and_deterministic(seed_h: Harness) -> None:
    first = heldout_harnesses(seed_h, 3, 2, exclude=())
    again = heldout_harnesses(seed_h, 3, 2, exclude=())
    assert [h.harness.sha for h in first] == [h.harness.sha for h in again]
    assert [h.label for h in first] == ["heldout-mut1", "heldout-mut2", "heldout-mut3", "heldout-para1",
                                        "heldout-para2"]  # fmt: skip
    shas = [h.harness.sha for h in first]
    assert len(set(shas)) == 5 and seed_h.sha not in shas
    assert all(h.kind == "heldout" for h in first)
    assert first[3].harness.spec.instruction == "Task: Add the two numbers."
    # a harness a run has seen is never a held-out one
    excluded = heldout_harnesses(seed_h, 3, 2, exclude={shas[0], shas[3]})
    assert not {shas[0], shas[3]} & {h.harness.sha for h in excluded}
    assert len([h for h in excluded if h.label.startswith("heldout-mut")]) == 3


def _archive_with_runs(tmp_path: Path, seed_h: Harness) -> tuple[Archive, list[Harness]]:
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    hs = [_variant(seed_h, f"Variant {i}.") for i in range(4)]
    for h in [seed_h, *hs]:
        archive.put_harness(h.sha, h.text, h.name, h.parent)
    for rid in ("r0", "r1"):
        archive.create_run(rid, "whale-fixed", {}, run_id=rid)
    ev: dict[str, Any] = {"split": "val", "completions": 10, "prompt_tokens": 10, "completion_tokens": 0}
    archive.record_evaluation("r0", hs[0].sha, "c0", subset="a", score=0.9, n=10, **ev)
    archive.record_evaluation("r0", hs[0].sha, "c0", subset="b", score=0.4, n=40, **ev)  # larger n counts
    archive.record_evaluation("r0", hs[1].sha, "c0", subset="a", score=0.6, n=10, **ev)
    archive.record_evaluation("r1", hs[2].sha, "c1", subset="a", score=0.7, n=10, **ev)
    archive.record_evaluation("r1", hs[3].sha, "c1", subset="a", score=0.2, n=10, **ev)
    archive.record_evaluation("r1", hs[3].sha, "c1", subset="t", score=0.99, n=10, **{**ev, "split": "test"})
    return archive, hs


def test_harness_set_finals_top_k_and_heldout(tmp_path: Path, seed_h: Harness) -> None:
    archive, hs = _archive_with_runs(tmp_path, seed_h)
    assert best_val_harnesses(archive, "r0", 5) == [(hs[1].sha, 0.6), (hs[0].sha, 0.4)]
    cfg = RobustnessConfig(top_k=2, max_top=2, heldout_mutants=2, paraphrases=1)
    cols = harness_set(archive, ["r0", "r1"], [("a/s0", hs[3].sha), ("b/s0", seed_h.sha)], seed_h, cfg)
    kinds = [c.kind for c in cols]
    assert kinds == ["seed", "final", "top", "top", "heldout", "heldout", "heldout"]
    assert cols[1].harness.sha == hs[3].sha and cols[1].label == "final:a/s0"
    assert [c.harness.sha for c in cols[2:4]] == [hs[2].sha, hs[1].sha]  # best first over runs, capped at 2
    shas = [c.harness.sha for c in cols]
    assert len(shas) == len(set(shas))
    assert not {c.harness.sha for c in cols if c.kind == "heldout"} & {h.sha for h in hs}


def test_harness_set_drops_input_equivalent_columns(tmp_path: Path, suite: Any, seed_h: Harness) -> None:
    archive, hs = _archive_with_runs(tmp_path, seed_h)
    twin_of_seed, twin_of_hs1 = _parse_only(seed_h), _parse_only(hs[1])
    ev: dict[str, Any] = {"split": "val", "completions": 10, "prompt_tokens": 10, "completion_tokens": 0}
    for h, score in ((twin_of_seed, 0.95), (twin_of_hs1, 0.5)):
        archive.put_harness(h.sha, h.text, h.name, h.parent)
        archive.record_evaluation("r0", h.sha, "c0", subset="a", score=score, n=10, **ev)
    cfg = RobustnessConfig(top_k=4, max_top=8, heldout_mutants=3, paraphrases=2)
    probe = probe_of(suite, "test", 8)
    by_sha = harness_set(archive, ["r0", "r1"], [], seed_h, cfg)
    assert twin_of_seed.sha in {c.harness.sha for c in by_sha}  # sha-only dedupe keeps the twin
    cols = harness_set(archive, ["r0", "r1"], [], seed_h, cfg, probe=probe)
    tops = [c.harness.sha for c in cols if c.kind == "top"]
    assert twin_of_seed.sha not in tops and hs[1].sha in tops and twin_of_hs1.sha not in tops
    sigs = [input_signature(c.harness, probe) for c in cols]
    assert len(sigs) == len(set(sigs))  # every column feeds the model different inputs
    seen = {input_signature(h, probe) for h in [seed_h, *hs, twin_of_seed, twin_of_hs1]}
    assert not {input_signature(c.harness, probe) for c in cols if c.kind == "heldout"} & seen
    # a held-out harness input-equivalent to one a run saw is skipped, even with a new sha
    plain = heldout_harnesses(seed_h, 3, 0, exclude=())
    twin = _parse_only(plain[0].harness)
    skipped = heldout_harnesses(seed_h, 3, 0, exclude=(), probe=probe, exclude_inputs={input_signature(twin, probe)})
    assert plain[0].harness.sha not in {h.harness.sha for h in skipped} and len(skipped) == 3


def test_real_matrix_on_the_micro_model(suite: Any, seed_h: Harness, micro_policy: Any) -> None:
    cols = [MatrixHarness("seed", "seed", seed_h), *heldout_harnesses(seed_h, 1, 1, exclude=())]
    models = [MatrixModel("micro", None, micro_policy, seed_h.sha)]
    m = compute_matrix(models, cols, suite, 8, rollout_evaluate(suite, batch_size=16))
    assert len(m.scores) == 1 and len(m.scores[0]) == 3
    assert all(0.0 <= v <= 1.0 for v in m.scores[0])
    assert m.own == [0]
