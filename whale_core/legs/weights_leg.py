"""The weights leg: GRPO post-training of the policy against a frozen harness (TRL ``GRPOTrainer`` + PEFT LoRA).

The harness renders every train-split problem (few-shot demos included) into TRL's ``prompt`` column as the exact
string the model sees at evaluation (chat-mode harnesses render through the tokenizer's chat template, so the column
is still a plain string: TRL 1.16 then tokenizes it like any text prompt and the model is trained on what it is
evaluated on). The reward is the suite's score of ``harness.parse_answer(completion)`` (`whale_core.legs.rewards`), plus
an optional generic shaping term (character similarity of the parsed answer to gold); the task score is what is
reported. GRPO itself is TRL's: this module and `whale_core.legs.grpo` (the TRL side) only build the dataset, the
rewards, the model (LoRA adapter or full weights, continued from a parent checkpoint) and the ``GRPOConfig``, then
record what happened.

In a run the leg is a `whale_core.legs.leg.Leg`: `WeightsLeg` (``run(LegStart) -> LegResult``) trains within the
weights budget, through `train_pair` (records in, records out) or the training call it is given (the flow's cached
``grpo-update`` task), and records the checkpoint.

Contracts:
- ``policy.model`` is trained in place (LoRA layers are injected into it, or its weights change) and left in eval
  mode; use the returned `Checkpoint` (``load_policy(base, adapter=ckpt.path)``) for a clean policy afterwards.
- ``out_dir/trainer/`` holds TRL's ``save_steps`` checkpoints; calling again with the same ``out_dir`` after a crash
  resumes from the last complete one (``TrainResult.resumed_from_step``); after a finished leg it returns the stored
  result. ``out_dir/checkpoint/`` is the leg's product (adapter or model, tokenizer, ``whale_checkpoint.json``).
- Completions are counted in the reward function (each generated completion is scored exactly once) and the leg never
  runs a step that would take it past ``max_completions``.

Population (co-overfitting mitigation, ``population=[...]``): each train problem is rendered by one member — the
incumbent for an ``incumbent_weight`` share, the others round-robin (`whale_core.legs.population.assign_population`,
seeded) — and its completions are rewarded as parsed by that member (``harness_idx`` column). The checkpoint still
records the incumbent's sha: it is the harness the leg was anchored on.

Completions end by the stop rule evaluation uses (`whale_core.stops`): TRL stops at the same end-token ids and the
rewards parse its decoded text cut at the same stop strings, so a completion is rewarded as it would be scored.

Memory: ``micro_batch_size`` splits a step's completions into forward/backward passes (gradient accumulation; the
completions per step, the prompts and the seeds do not change); TRL computes log-probabilities of completion tokens
only, through its fused LM head (no full-vocabulary logits over prompt positions); ``gradient_checkpointing``
recomputes activations. Measured on SmolLM2-135M in docs/weights-leg.md.

Simplified: the difficulty filter probes a seeded sample of train problems with the base policy (its cost is counted
in ``TrainResult.completions``); the difficulty filter probes with the incumbent alone; the GPU-only vLLM options are
passed through to TRL untested here.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from whale_core import progress as progress_events
from whale_core import seeds
from whale_core.legs.grpo import (
    Spent,
    StepMetrics,
    grpo_args,
    leg_callback,
    prepare_model,
    quiet,
    resume_point,
    run_trainer,
    step_metrics,
    train_dataset,
)
from whale_core.legs.leg import LegKind, LegResult, LegStart
from whale_core.legs.rewards import SimilarityReward, TaskScoreReward
from whale_core.legs.weights_config import (
    DifficultyFilter,
    WeightsConfig,
    completions_per_step,
    upgrade_lora_keys,
)
from whale_core.records.checkpoints import CHECKPOINT_FILE, Checkpoint, save_checkpoint
from whale_core.records.portable import to_home
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.suites.base import Problem

__all__ = [  # the records and config are defined next door and re-exported: the weights leg's API in one place
    "CHECKPOINT_FILE",
    "Checkpoint",
    "DifficultyFilter",
    "StepMetrics",
    "Train",
    "TrainResult",
    "WeightsConfig",
    "WeightsLeg",
    "WeightsOutcome",
    "completions_per_step",
    "reward_stats",
    "train_pair",
    "train_weights_leg",
]


@dataclass
class TrainResult:
    """What `train_weights_leg` did: its checkpoint, TRL's per-step metrics, the completions it spent."""

    checkpoint: Checkpoint
    steps: list[StepMetrics]
    completions: int  # GRPO completions + difficulty-filter probes
    seconds: float  # wall time of this call
    resumed_from_step: int | None
    filter_completions: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def train_weights_leg(
    policy: Any,
    harness: Any,
    suite: Any,
    cfg: WeightsConfig,
    *,
    out_dir: Path,
    max_completions: int | None = None,
    parent_checkpoint: Checkpoint | None = None,
    progress: Callable[[StepMetrics], None] | None = None,
    callbacks: Sequence[Any] = (),
    population: Sequence[Any] = (),
) -> TrainResult:
    """Run one GRPO leg of ``policy`` against the frozen ``harness`` on ``suite``'s train split (see module doc).

    ``population``: other harnesses that render a share of the train prompts (mitigation; duplicates of the incumbent
    are dropped), typically `whale_core.legs.population.population_harnesses` of the run's archive with
    ``cfg.population.k``; ``cfg.population.incumbent_weight`` is the incumbent's share of the prompts.

    ``progress`` gets each step's `StepMetrics` as TRL logs it; ``callbacks`` are extra ``transformers``
    ``TrainerCallback`` objects handed to the trainer (e.g. to inspect the model at ``on_train_begin``).
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer_dir, final_dir = out_dir / "trainer", out_dir / "checkpoint"
    per_step = completions_per_step(cfg)
    members = [harness, *{h.sha: h for h in population if h.sha != harness.sha}.values()]
    result_file = out_dir / "leg_result.json"
    _claim_out_dir(out_dir, _leg_spec(policy, cfg, members, parent_checkpoint, max_completions))
    if result_file.is_file() and (final_dir / CHECKPOINT_FILE).is_file():
        return _load_result(result_file, final_dir)

    stops = list(harness.spec.decoding.stop or [])
    member_stops = [list(m.spec.decoding.stop or []) for m in members]
    max_len = cfg.max_completion_length or max(int(m.spec.decoding.max_new_tokens) for m in members)
    tokenizer = policy.tokenizer
    pool = list(suite.problems("train"))
    if not pool:
        raise ValueError(f"suite {getattr(suite, 'name', suite)!r} has no train problems")

    import torch

    with quiet():
        model, peft_config, adapter_base = prepare_model(policy, cfg, parent_checkpoint)
    start = copy.copy(policy)  # the leg's starting policy (parent adapter loaded) for the difficulty probe
    start.model = model
    problems, filter_cost = _filtered_problems(start, harness, suite, cfg, pool, out_dir)
    budget = None if max_completions is None else max_completions - filter_cost
    max_steps = cfg.steps if budget is None else min(cfg.steps, budget // per_step)
    if max_steps < 1:
        raise ValueError(
            f"max_completions={max_completions} leaves {budget} completions after the difficulty filter: less than "
            f"one step ({per_step} completions)"
        )
    dataset = train_dataset(problems, members, pool, tokenizer, cfg)
    pop = list(zip(members, member_stops, strict=True))
    task = TaskScoreReward(harness, suite, problems, stops, population=pop)
    rewards: list[Any] = [task]
    if cfg.shaping_weight > 0:
        rewards.append(SimilarityReward(harness, suite, problems, stops, population=pop))
    on_cpu = torch.device(getattr(model, "device", "cpu")).type == "cpu"
    args = grpo_args(cfg, trainer_dir, max_steps, max_len, on_cpu, on_cpu is False and torch.cuda.is_bf16_supported())
    resume, prior = resume_point(trainer_dir, per_step)
    spent = Spent(filter_cost, prior, task)

    def report(m: StepMetrics) -> None:  # the console's live line (whale_core.progress), then the caller's
        progress_events.grpo_step(None, m.step, max_steps, m.reward_mean)
        if progress is not None:
            progress(m)

    ours = leg_callback(trainer_dir, per_step, max_completions, spent, report)
    trainer = run_trainer(
        model, tokenizer, member_stops, rewards, args, dataset, peft_config, [ours, *callbacks],
        resume[1] if resume else None,
    )  # fmt: skip
    trained: Any = trainer.model
    trained.eval()
    steps_done = int(trainer.state.global_step)
    metrics = step_metrics(trainer.state.log_history, per_step)
    with quiet():
        ckpt = save_checkpoint(
            trained, tokenizer, final_dir, harness.sha, parent_checkpoint, adapter_base, policy, steps_done
        )
    result = TrainResult(
        checkpoint=ckpt,
        steps=metrics,
        completions=spent.total,
        seconds=time.perf_counter() - t0,
        resumed_from_step=resume[0] if resume else None,
        filter_completions=filter_cost,
        extra={"train_problems": len(problems), "max_steps": max_steps},
    )
    result_file.write_text(json.dumps(asdict(result), indent=1))
    if not cfg.keep_trainer_checkpoints:
        shutil.rmtree(trainer_dir, ignore_errors=True)
    return result


def _leg_spec(
    policy: Any, cfg: WeightsConfig, members: Sequence[Any], parent: Checkpoint | None, max_completions: int | None
) -> dict[str, Any]:
    """What identifies a leg in its ``out_dir`` (``leg_spec.json``): config, harness (and population), parent
    checkpoint, base model and adapter, budget."""
    spec = {
        "cfg": cfg.model_dump(mode="json"),
        "harness": members[0].sha,
        "parent": parent.id if parent else None,
        # relative to the home when under it: a leg interrupted in a home that is then moved still resumes
        "base": to_home(policy.base_path),
        "policy_adapter": to_home(policy.adapter_path) if policy.adapter_path else None,
        "max_completions": max_completions,
    }
    if len(members) > 1:
        spec["population"] = [h.sha for h in members[1:]]
    return spec


def _claim_out_dir(out_dir: Path, spec: dict[str, Any]) -> None:
    """Write the leg's spec into ``out_dir``; refuse a directory that holds a different leg's."""
    spec_file = out_dir / "leg_spec.json"
    if spec_file.is_file() and not _same_leg(json.loads(spec_file.read_text()), spec):
        raise ValueError(
            f"{out_dir} holds a different leg (config, harness, population, parent or budget differ): use a new out_dir"
        )
    spec_file.write_text(json.dumps(spec, indent=1, sort_keys=True))


def _same_leg(stored: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a stored leg spec describes ``spec``'s leg. The stored config is re-validated first, so a config
    written before WeightsConfig gained a (defaulted) field still matches; one with an unknown field does not."""
    try:
        cfg = WeightsConfig.model_validate(upgrade_lora_keys(stored.get("cfg", {}))).model_dump(mode="json")
    except Exception:
        return False
    paths = {k: to_home(stored[k]) for k in ("base", "policy_adapter") if stored.get(k)}  # rows written absolute
    return {**stored, "cfg": cfg, **paths} == spec


def _filtered_problems(
    policy: Any, harness: Any, suite: Any, cfg: WeightsConfig, pool: list[Problem], out_dir: Path
) -> tuple[list[Problem], int]:
    """The leg's train problems and what the difficulty filter cost in completions (stored: a resume re-uses it).

    The probe is a `rollout` of the leg's starting policy with the harness at the exploration temperature and
    ``samples`` completions per problem; a problem's accuracy is the mean of its per-sample scores.
    """
    f = cfg.difficulty_filter
    if f is None:
        return pool, 0
    store = out_dir / "difficulty_filter.json"
    by_id = {p.id: p for p in pool}
    if store.is_file():
        saved = json.loads(store.read_text())
        return [by_id[i] for i in saved["kept"]], int(saved["cost"])
    from whale_core.rollout import rollout

    probed = seeds.rng("whale-filter", cfg.seed).sample(pool, min(f.max_problems, len(pool)))
    probe = harness.evolve(decoding={"temperature": cfg.temperature}, inference={"samples": f.samples})
    res = rollout(policy, probe, suite, probed, demo_pool=pool, batch_size=256, seed=cfg.seed, split="train")
    acc = [sum(t.sample_scores) / len(t.sample_scores) if t.sample_scores else 0.0 for t in res.traces]
    kept = [p for p, a in zip(probed, acc, strict=True) if f.low <= a <= f.high]
    if len(kept) < f.min_keep:
        kept = probed
    saved = {"kept": [p.id for p in kept], "cost": res.completions, "probed": len(probed), "mean": sum(acc) / len(acc)}
    store.write_text(json.dumps(saved))
    return kept, res.completions


def _load_result(result_file: Path, final_dir: Path) -> TrainResult:
    data = json.loads(result_file.read_text())
    data["checkpoint"] = Checkpoint.load(final_dir)
    data["steps"] = [StepMetrics(**s) for s in data["steps"]]
    data["seconds"] = 0.0
    return TrainResult(**data)


@dataclass(frozen=True)
class WeightsOutcome:
    """A training call's product, in records: the new policy, its checkpoint (`Checkpoint` as a dict), the
    completions spent, the wall time, the TRL step it resumed from, and the per-step metrics (`StepMetrics` dicts).
    What the flow's ``grpo-update`` task returns and persists."""

    policy: PolicyRef
    checkpoint: dict[str, Any]
    completions: int
    seconds: float
    resumed_from_step: int | None
    steps: list[dict[str, Any]] = field(default_factory=list)


def train_pair(
    base: PolicyRef,
    policy: PolicyRef,
    harness: HarnessRef,
    suite: Any,
    cfg: WeightsConfig,
    *,
    out_dir: Path,
    max_completions: int | None = None,
    population: Sequence[HarnessRef] = (),
    callbacks: Sequence[Any] = (),
) -> WeightsOutcome:
    """`train_weights_leg` from records: loads a trainable copy of ``base``, continues from ``policy``'s checkpoint
    (none when ``policy`` is the base), trains against ``harness`` (and ``population``), and returns the records."""
    from whale_core.records.refs import checkpoint_from_dir

    parent = None if policy.is_base else checkpoint_from_dir(policy.adapter or policy.model)
    trainable = base.load(trainable=True)
    leg = train_weights_leg(
        trainable,
        harness.load(),
        suite,
        cfg,
        out_dir=Path(out_dir),
        max_completions=max_completions,
        parent_checkpoint=parent,
        population=[m.load() for m in population],
        callbacks=callbacks,
    )
    return WeightsOutcome(
        policy=PolicyRef.of_checkpoint(base, leg.checkpoint),
        checkpoint=asdict(leg.checkpoint),
        completions=leg.completions,
        seconds=leg.seconds,
        resumed_from_step=leg.resumed_from_step,
        steps=[asdict(s) for s in leg.steps],
    )


class _Trained(Protocol):
    """What a ``train`` callable of `WeightsLeg` returns (`WeightsOutcome` is one)."""

    @property
    def policy(self) -> PolicyRef: ...
    @property
    def checkpoint(self) -> Mapping[str, Any]: ...
    @property
    def completions(self) -> int: ...
    @property
    def steps(self) -> Sequence[Mapping[str, Any]]: ...


Train = Callable[[PolicyRef, HarnessRef, int], _Trained]
"""``train(policy, harness, max_completions)``: one GRPO leg from ``policy`` against ``harness``."""


class _CheckpointRecorder(Protocol):
    """The part of `whale_core.records.recorder.Recorder` the weights leg writes through."""

    def checkpoint(
        self,
        checkpoint: Mapping[str, Any],
        trained_against: HarnessRef,
        score: float,
        steps: Sequence[Mapping[str, Any]],
    ) -> None: ...


def reward_stats(steps: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A leg's GRPO reward figures from its per-step metrics: steps run, the task-score reward of the first and last
    step and its mean over the steps, and the mean share of groups with zero reward spread (no learning signal)."""
    if not steps:
        return {"steps": 0.0}
    rewards = [float(s["reward_mean"]) for s in steps]
    return {
        "steps": float(len(steps)),
        "reward_first": rewards[0],
        "reward_last": rewards[-1],
        "reward_mean": sum(rewards) / len(rewards),
        "frac_zero_std_groups": sum(float(s["frac_zero_std_groups"]) for s in steps) / len(steps),
    }


class WeightsLeg:
    """The weights leg as a `whale_core.legs.leg.Leg`: GRPO from the start policy against the start harness (kept).

    ``base``: the untrained policy (LoRA checkpoints apply to it); ``suite``: a suite object (its train split);
    ``cfg``: the ``weights:`` section with the leg's own GRPO seed (in a run, `whale_core.seeds.weights_leg_seed` of
    the run's seed and the iteration: the engine sets it); ``out_dir``: this leg's directory (a second call
    with the same one resumes or returns the finished leg, see `train_weights_leg`); ``population``: the mitigation's
    extra harnesses; ``reserve``: completions of the weights budget kept back for the evaluation that follows (the
    leg trains on at most ``budget.remaining("weights") - reserve``); ``recorder``: where the checkpoint is recorded
    (with the harness it was trained against and the start's val score); ``train``: replaces the training call (the
    flow passes its cached ``grpo-update`` task); by default `train_pair` runs here.

    ``run`` returns ``LegResult(kind="weights", policy=<new>, harness=<start's>, completions, accepted=None,
    metrics=reward_stats(...))``; with no budget left it returns the start pair and 0 completions.
    """

    kind: LegKind = "weights"

    def __init__(
        self,
        base: PolicyRef,
        suite: Any,
        cfg: WeightsConfig,
        out_dir: Path,
        *,
        population: Sequence[HarnessRef] = (),
        reserve: int = 0,
        recorder: _CheckpointRecorder | None = None,
        train: Train | None = None,
    ) -> None:
        self.base, self.suite, self.cfg, self.out_dir = base, suite, cfg, Path(out_dir)
        self.population, self.reserve, self.recorder, self.train = list(population), reserve, recorder, train

    def run(self, start: LegStart) -> LegResult:
        """One GRPO leg from ``start`` (see the class docstring); charges the completions to the weights budget."""
        bud = start.budget
        cap = bud.remaining("weights") - self.reserve
        if cap <= 0:
            return LegResult("weights", start.policy, start.harness, 0)
        out = self.train(start.policy, start.harness, cap) if self.train else self._train_here(start, cap)
        bud.charge_up_to("weights", out.completions)
        if self.recorder is not None:
            self.recorder.checkpoint(out.checkpoint, start.harness, start.metric, out.steps)
        return LegResult("weights", out.policy, start.harness, out.completions, metrics=reward_stats(out.steps))

    def _train_here(self, start: LegStart, cap: int) -> WeightsOutcome:
        return train_pair(
            self.base, start.policy, start.harness, self.suite, self.cfg,
            out_dir=self.out_dir, max_completions=cap, population=self.population,
        )  # fmt: skip
