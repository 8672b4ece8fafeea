"""A scripted world for the engine's unit tests: `FakeCalls` answers every call of `whale_core.ascent.calls.Calls`
from a table of true scores per (policy, harness), with no model, no Prefect and no MLflow.

A pair's per-problem val scores are a fixed threshold pattern: problem ``j`` of the validation order scores 1 when
``frac(j * 0.618...) < p`` for the pair's true score ``p``. So a better pair scores 1 on a superset of a worse
pair's problems — the paired test separates them cleanly — and every score is reproducible. Training is scripted
too: ``train`` maps (policy, harness trained against) to the next policy id, by a rule the test gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from whale_core.ascent.calls import Evaluation, ProposedText, Site, Split, TrainJob
from whale_core.ascent.engine import BlockAscent
from whale_core.config import WhaleConfig, load_config
from whale_core.harness import Harness
from whale_core.legs.schedule import Decision, LegOutcome, make_scheduler
from whale_core.legs.scoring import ScoreBlock
from whale_core.legs.weights_leg import WeightsOutcome
from whale_core.proposers.base import ProposalContext
from whale_core.records.archive import Archive
from whale_core.records.recorder import Recorder, create_run
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites import load_suite

T = TypeVar("T")
GOLDEN = (math.sqrt(5) - 1) / 2
SMALL = [
    "rollout.val_problems=40",
    "rollout.test_problems=40",
    "search.candidates=2",
    "search.rounds=[20,40]",
    "weights.per_device_train_batch_size=16",
    "weights.num_generations=4",
    "weights.steps=2",
    "budget.total=100000",
]


def pattern(p: float, start: int, end: int) -> list[float]:
    return [1.0 if (j * GOLDEN) % 1.0 < p else 0.0 for j in range(start, end)]


def harness(name: str, **changes: Any) -> Harness:
    base = Harness.from_text(load_suite("arith").seed_harness)
    return base.evolve(name=name, **changes) if changes or name != base.name else base


@dataclass
class FakeCalls:
    """`Calls` from score tables. ``true[(policy_id, sha)]`` is a pair's true score (``default`` otherwise);
    ``proposals[i]`` the texts the proposer returns in iteration ``i``; ``trained(policy_id, sha, i)`` the id of the
    policy a weights leg of iteration ``i`` trains from ``policy_id`` against harness ``sha``."""

    cfg: WhaleConfig
    true: dict[tuple[str, str], float]
    proposals: dict[int, list[Harness]] = field(default_factory=dict)
    trained: Callable[[str, str, int], str] = lambda pid, sha, i: f"{pid}+w{i}"
    default: float = 0.05
    log: list[tuple[str, str]] = field(default_factory=list)

    def p(self, policy: PolicyRef, sha: str) -> float:
        return self.true.get((policy.checkpoint_id, sha), self.default)

    def rollout(self, policy: PolicyRef, harness: HarnessRef, split: Split, n: int, site: Site) -> Evaluation:
        self.log.append(("rollout", site.label))
        scores = pattern(self.p(policy, harness.sha), 0, n)
        return Evaluation(sum(scores) / n, n, n, 10 * n, n, "", 0.0, tuple(scores))

    def schedule(self, history: Sequence[LegOutcome], site: Site) -> Decision:
        self.log.append(("schedule", site.label))
        return make_scheduler(self.cfg.mode, self.cfg.schedule).next_leg(history)

    def train(self, job: TrainJob, site: Site) -> WeightsOutcome:
        self.log.append(("train", site.label))
        i = site.iteration or 0
        new_id = self.trained(job.policy.checkpoint_id, job.harness.sha, i)
        steps = job.weights.steps
        ckpt = {"id": new_id, "path": str(Path(job.out_dir) / "checkpoint"), "harness_sha": job.harness.sha,
                "parent_id": None if job.policy.is_base else job.policy.checkpoint_id, "step": steps}  # fmt: skip
        completions = steps * job.weights.per_device_train_batch_size
        policy = PolicyRef("tiny", ckpt["path"], new_id, is_base=False)
        metrics = [{"step": s + 1, "reward_mean": 0.5, "reward_std": 0.1, "frac_zero_std_groups": 0.0}
                   for s in range(steps)]  # fmt: skip
        return WeightsOutcome(policy, ckpt, completions, 0.0, None, metrics)

    def propose(self, context: ProposalContext, k: int, seed: int, site: Site) -> list[ProposedText]:
        self.log.append(("propose", site.label))
        texts = [h.text for h in self.proposals.get(site.iteration or 0, [])]
        return [ProposedText(t, "valid", None, "scripted") for t in texts][:k]

    def score(self, policy: PolicyRef, jobs: Sequence[tuple[Harness, int, int]], site: Site) -> list[ScoreBlock]:
        out = []
        for h, a, b in jobs:
            self.log.append(("score", h.name))
            scores = pattern(self.p(policy, h.sha), a, b)
            traces = [
                {"problem_id": f"p{j}", "prompt": "1+1=", "completions": ["2"], "answer": "2", "gold": "2",
                 "score": s, "error": None, "prompt_tokens": 10, "completion_tokens": 1}
                for j, s in zip(range(a, b), scores, strict=True)
            ]  # fmt: skip
            out.append(ScoreBlock(scores, [10] * len(scores), len(scores), traces))
        return out

    def iteration(self, iteration: int, kind: str, body: Callable[[], T]) -> T:
        self.log.append(("iteration", f"{iteration}-{kind}"))
        return body()

    def leg_done(self, iteration: int, kind: str, leg_id: int, policy_id: str) -> None:
        return None

    def link(self) -> str | None:
        return None


BASE = PolicyRef("tiny", None, "base", is_base=True)


def engine(
    tmp: Path, overrides: list[str], true: dict[tuple[str, str], float], **kw: Any
) -> tuple[BlockAscent, FakeCalls, Archive]:
    """A `BlockAscent` over `FakeCalls` with a real SQLite archive in ``tmp`` (no MLflow, no Prefect)."""
    cfg = load_config(None, [*SMALL, *overrides])
    calls = FakeCalls(cfg, true, **kw)
    archive = Archive(f"sqlite:///{tmp / 'whale.db'}")
    create_run(archive, "r", cfg.mode, cfg.model_dump(mode="json"))
    rec = Recorder(archive, run_id="r")
    seed = HarnessRef.of(harness("seed"))
    e = BlockAscent(cfg, calls, rec, suite=load_suite("arith"), run_dir=tmp / "run", base=BASE, seed_harness=seed)
    return e, calls, archive
