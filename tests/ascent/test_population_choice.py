"""The engine's choice of a weights leg's population (mitigation), on a real SQLite archive."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from whale_core.ascent.engine import BlockAscent
from whale_core.config import load_config
from whale_core.harness import Harness
from whale_core.records.archive import Archive
from whale_core.records.recorder import Recorder
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites import load_suite


def test_population_is_the_runs_best_other_harnesses_as_of_the_leg(tmp_path: Path) -> None:
    seed = Harness.from_text(load_suite("arith").seed_harness)
    others = [seed.evolve(instruction=f"Variant {i}.") for i in range(3)]
    steps = [step.model_dump(by_alias=True, exclude_none=True) for step in seed.spec.parse]
    twin = seed.evolve(parse=[*steps, {"int": True}])  # the incumbent's prompts under another sha
    hot = seed.evolve(decoding={"temperature": 0.8})  # ditto: training samples at the weights config's temperature
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    archive.create_run("r", "whale-fixed", {}, run_id="r")
    ev = {"split": "val", "completions": 1, "prompt_tokens": 1, "completion_tokens": 0, "subset": "a", "n": 10}
    for h, score in zip([seed, *others, twin, hot], [0.5, 0.2, 0.7, 0.4, 0.9, 0.8], strict=True):
        archive.put_harness(h.sha, h.text, h.name, h.parent)
        archive.record_evaluation("r", h.sha, "c0", score=score, **ev)
    inc = HarnessRef.of(seed)

    def population(overrides: list[str], as_of: datetime) -> list[HarnessRef]:
        cfg = load_config(None, overrides)
        rec = Recorder(archive, run_id="r")
        e = BlockAscent(cfg, None, rec, suite=load_suite("arith"), run_dir=tmp_path,  # type: ignore[arg-type]
                        base=PolicyRef("tiny", None, "c0"), seed_harness=inc)  # fmt: skip
        return e._population(inc, as_of)

    later = datetime.now() + timedelta(days=1)
    assert load_config(None, []).weights.population.k == 0 and population([], later) == []
    got = population(["weights.population.k=2"], later)
    # best first; the incumbent and its prompt-equivalent twins (best val scores, but the same prompts) excluded
    assert [r.sha for r in got] == [others[1].sha, others[2].sha]
    assert all(r.load().sha == r.sha for r in got)
    earlier = datetime.now() - timedelta(days=1)  # a replayed leg that first started before any evaluation
    assert population(["weights.population.k=2"], earlier) == []
