"""What a run opens before its ascent: its recorder (archive row and MLflow parent run) and its engine (the suite,
the base policy and the seed harness a config names)."""

from __future__ import annotations

from pathlib import Path

from whale_core.ascent.calls import Calls
from whale_core.ascent.engine import BlockAscent
from whale_core.config import WhaleConfig, flatten
from whale_core.harness import Harness
from whale_core.records.archive import Archive
from whale_core.records.lineage import Lineage
from whale_core.records.recorder import Recorder, suite_splits
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites import Suite, load_suite


def run_splits(cfg: WhaleConfig) -> dict[str, dict[str, object]]:
    """The run's val and test splits as the `Recorder` names them in MLflow (datasets of the scores)."""
    r = cfg.rollout
    return suite_splits(cfg.suite.model_dump(mode="json"), cfg.seed, r.val_problems, r.test_problems)


def run_recorder(cfg: WhaleConfig, run_id: str) -> Recorder:
    """The recorder of run ``run_id`` (archive and MLflow as ``cfg.tracking`` says; created when missing)."""
    return Recorder.open(
        Archive(cfg.tracking.archive_url),
        Lineage(cfg.tracking.mlflow_uri, cfg.tracking.experiment),
        run_id=run_id,
        mode=cfg.mode,
        config=cfg.model_dump(mode="json"),
        params=flatten(cfg.model_dump(mode="json")),
        tags={"whale.mode": cfg.mode, "whale.suite": cfg.suite.name, "whale.model": cfg.model.name},
        splits=run_splits(cfg),
    )


def seed_harness(cfg: WhaleConfig, suite: Suite) -> Harness:
    """The run's starting harness: ``cfg.harness`` (a file) or the suite's seed harness."""
    if cfg.harness:
        return Harness.from_file(cfg.harness)
    return Harness.from_text(suite.seed_harness)


def engine_for(
    cfg: WhaleConfig,
    calls: Calls,
    recorder: Recorder,
    run_dir: Path,
    *,
    suite: Suite | None = None,
    rerun_from: int | None = None,
    generation: int = 0,
) -> BlockAscent:
    """The block ascent ``cfg`` describes: its suite, the base policy (``model``) and the seed harness."""
    s = suite if suite is not None else load_suite(cfg.suite)
    return BlockAscent(
        cfg, calls, recorder, suite=s, run_dir=run_dir, base=PolicyRef.base(cfg.model.name, cfg.model.device),
        seed_harness=HarnessRef.of(seed_harness(cfg, s)), rerun_from=rerun_from, generation=generation,
    )  # fmt: skip
