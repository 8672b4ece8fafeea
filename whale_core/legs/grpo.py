"""The TRL side of the weights leg: what `whale_core.legs.weights_leg.train_weights_leg` hands ``GRPOTrainer`` and
reads back from it.

- `grpo_args`: the leg's ``GRPOConfig`` (WeightsConfig's knobs, WHALE's fixed settings, then ``weights.extra``,
  checked: an unknown or WHALE-owned field is an error naming the right knob);
- `prepare_model`: the model to train (LoRA adapter, a parent adapter continued, or full weights) and its LoraConfig;
- `train_dataset`: the ``prompt`` column as the harness (or its population member) renders it for evaluation, with
  `trl_chat_prompt` for chat-mode harnesses, and the columns the rewards read;
- `resume_point`, `leg_callback`, `Spent`: resuming after a kill and stopping within the completion budget;
- `run_trainer`: ``GRPOTrainer`` with the stop rule's end tokens (`whale_core.stops`);
- `step_metrics`: TRL's logs as `StepMetrics`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale_core.legs.rewards import TaskScoreReward
from whale_core.legs.weights_config import WeightsConfig, micro_batching
from whale_core.records.checkpoints import Checkpoint
from whale_core.stops import end_token_ids
from whale_core.suites.base import Problem

__all__ = [
    "LEG_STATE",
    "Spent",
    "StepMetrics",
    "grpo_args",
    "leg_callback",
    "prepare_model",
    "quiet",
    "resume_point",
    "run_trainer",
    "step_metrics",
    "train_dataset",
    "trl_chat_prompt",
    "valid_checkpoints",
]

LEG_STATE = "whale_leg_state.json"


# GRPOConfig fields WHALE sets itself: `extra` may not override them (first-class knobs are named in the error).
_OWNED = {
    "output_dir",
    "max_steps",
    "resume_from_checkpoint",
    "report_to",
    "logging_steps",
    "save_strategy",
    "activation_checkpointing",
    "gradient_accumulation_steps",  # the three batch knobs follow weights.per_device_train_batch_size/micro_batch_size
    "steps_per_generation",
    "generation_batch_size",
}


@dataclass
class StepMetrics:
    """One optimizer step from TRL's logs. Rewards are the task score's; ``completions`` is the leg's running total."""

    step: int
    reward_mean: float
    reward_std: float
    frac_zero_std_groups: float
    kl: float | None
    seconds: float  # TRL's step_time: generation + loss + backward, without the optimizer update
    completions: int


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence transformers' "gradient_checkpointing is deprecated ... v6" FutureWarnings that TRL/PEFT trigger."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated and will be removed in v6.*", category=FutureWarning)
        yield


def valid_checkpoints(trainer_dir: Path) -> list[tuple[int, Path]]:
    """TRL checkpoints that were written completely (trainer_state.json is written last), newest first."""
    found = []
    for d in trainer_dir.glob("checkpoint-*") if trainer_dir.is_dir() else []:
        suffix = d.name.split("-", 1)[1]
        if suffix.isdigit() and (d / "trainer_state.json").is_file():
            found.append((int(suffix), d))
        elif suffix.isdigit():
            shutil.rmtree(d, ignore_errors=True)  # a save interrupted by a kill: unusable
    return sorted(found, reverse=True)


def grpo_args(
    cfg: WeightsConfig, trainer_dir: Path, max_steps: int, max_len: int, on_cpu: bool, cuda_bf16: bool
) -> Any:
    """The GRPOConfig of the leg: WeightsConfig's knobs, WHALE's fixed settings, then ``extra`` (checked)."""
    from trl import GRPOConfig

    valid = {f.name for f in dataclasses.fields(GRPOConfig)}
    for key in cfg.extra:
        if key not in valid:
            import difflib

            close = difflib.get_close_matches(key, sorted(valid), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"weights.extra: {key!r} is not a GRPOConfig field{hint}")
        if key in _OWNED or key in WeightsConfig.model_fields:
            raise ValueError(
                f"weights.extra: {key!r} is set by WHALE; batch sizes: weights.per_device_train_batch_size "
                "(completions per step) and weights.micro_batch_size (per pass); other knobs: weights.<name>"
            )
    bf16 = cfg.bf16 if cfg.bf16 is not None else (not on_cpu and cuda_bf16)
    same = ("learning_rate", "lr_scheduler_type", "warmup_steps", "num_generations", "temperature", "beta",
            "loss_type", "scale_rewards", "seed", "save_steps", "use_vllm", "vllm_mode")  # fmt: skip
    micro, accumulate = micro_batching(cfg)
    kwargs: dict[str, Any] = {k: getattr(cfg, k) for k in same} | dict(
        per_device_train_batch_size=micro, gradient_accumulation_steps=accumulate,
        output_dir=str(trainer_dir), max_steps=max_steps, max_completion_length=max_len, data_seed=cfg.seed,
        logging_steps=1, save_strategy="steps", save_total_limit=2, report_to="none", disable_tqdm=True,
        use_cpu=on_cpu, bf16=bf16, activation_checkpointing=cfg.gradient_checkpointing, log_completions=False,
        reward_weights=[1.0, cfg.shaping_weight] if cfg.shaping_weight > 0 else None,
    )  # fmt: skip
    kwargs.update(cfg.extra)
    return GRPOConfig(**kwargs)


def prepare_model(policy: Any, cfg: WeightsConfig, parent: Checkpoint | None) -> tuple[Any, Any, str]:
    """The model to hand TRL, the LoraConfig to pass (None when the model already carries its adapter) and the
    base-model path a LoRA checkpoint of this leg applies to."""
    from peft import LoraConfig, PeftModel
    from peft.tuners.tuners_utils import BaseTunerLayer

    if getattr(policy, "merged", False):
        raise ValueError(
            "this policy's adapter is merged into its weights (an inference policy); load it with "
            "load_policy(..., trainable=True) or PolicyRef.load(trainable=True) to train it"
        )
    model = policy.model
    base_path = str(policy.base_path)
    start_adapter: str | None = None
    if parent is not None and parent.is_lora:
        if str(policy.adapter_path or "") != parent.path:
            start_adapter = parent.path
        base_path = parent.base_model
    elif parent is not None:  # a full-weights parent: train on top of its weights
        if str(policy.base_path) != parent.path:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(parent.path, dtype=model.dtype).to(model.device)
        base_path = parent.path
    if start_adapter is not None:
        if isinstance(model, PeftModel):
            model = model.get_base_model()
        if any(isinstance(m, BaseTunerLayer) for m in model.modules()):
            raise ValueError(
                "policy.model already carries LoRA layers (trained in place by an earlier leg?); reload the policy "
                "with load_policy(...) before chaining from a parent checkpoint"
            )
        model = PeftModel.from_pretrained(model, start_adapter, is_trainable=True)
    if isinstance(model, PeftModel):
        if not cfg.lora.enabled:
            return model.merge_and_unload(), None, base_path
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
        return model, None, base_path
    if not cfg.lora.enabled:
        for p in model.parameters():
            p.requires_grad_(True)
        return model, None, base_path
    peft_config = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return model, peft_config, base_path


def trl_chat_prompt(text: str, tokenizer: Any, name: str) -> str:
    """A chat-rendered prompt as TRL must receive it. The chat template already wrote the special tokens (rollouts
    tokenize it without adding any), but TRL 1.16 tokenizes string prompts *with* them: drop a leading BOS text
    when that makes both tokenizations equal, and refuse a prompt that would still differ."""
    want = tokenizer(text, add_special_tokens=False).input_ids
    if tokenizer(text).input_ids == want:
        return text
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and tokenizer(text[len(bos) :]).input_ids == want:
        return text[len(bos) :]
    raise ValueError(
        f"harness {name!r} (chat mode): TRL would tokenize the rendered prompt differently from rollouts "
        "(the tokenizer adds special tokens the chat template did not start with); use a text-mode harness"
    )


def step_metrics(log_history: list[dict[str, Any]], per_step: int) -> list[StepMetrics]:
    out = []
    for e in log_history:
        if "reward" not in e or "step" not in e:
            continue
        out.append(
            StepMetrics(
                step=int(e["step"]),
                reward_mean=float(e.get("rewards/task_score/mean", e["reward"])),
                reward_std=float(e.get("rewards/task_score/std", e.get("reward_std", 0.0))),
                frac_zero_std_groups=float(e.get("frac_reward_zero_std", 0.0)),
                kl=float(e["kl"]) if e.get("kl") is not None else None,
                seconds=float(e.get("step_time", 0.0)),
                completions=int(e["step"]) * per_step,
            )
        )
    return out


def train_dataset(
    problems: list[Problem], members: Sequence[Any], pool: list[Problem], tokenizer: Any, cfg: WeightsConfig
) -> Any:
    """TRL's train dataset: each problem's prompt as its population member renders it (`assign_population`), with
    the ``problem_id``, ``answer`` and ``harness_idx`` columns the rewards read."""
    from datasets import Dataset

    from whale_core.legs.population import assign_population

    assign = assign_population([p.id for p in problems], len(members), cfg.seed, cfg.population.incumbent_weight)
    prompts = []
    for p, m in zip(problems, assign, strict=True):
        h = members[m]
        text = h.render(p, h.select_demos(p, pool, cfg.seed), tokenizer=tokenizer)
        prompts.append(trl_chat_prompt(text, tokenizer, h.name) if h.is_chat else text)
    return Dataset.from_dict(
        {"prompt": prompts, "problem_id": [p.id for p in problems], "answer": [p.answer for p in problems],
         "harness_idx": assign}
    )  # fmt: skip


def resume_point(trainer_dir: Path, per_step: int) -> tuple[tuple[int, Path] | None, int]:
    """The TRL checkpoint to resume from (step, dir), if any, and the completions spent before it."""
    checkpoints = valid_checkpoints(trainer_dir)
    resume = checkpoints[0] if checkpoints else None
    prior = 0
    if resume is not None:
        state = resume[1] / LEG_STATE
        prior = json.loads(state.read_text())["completions"] if state.is_file() else resume[0] * per_step
    return resume, prior


@dataclass
class Spent:
    """The leg's completions so far: the difficulty filter's, those of an interrupted attempt, and the rewards'."""

    filter_cost: int
    prior: int
    task: TaskScoreReward

    @property
    def total(self) -> int:
        return self.filter_cost + self.prior + self.task.count


def leg_callback(
    trainer_dir: Path,
    per_step: int,
    max_completions: int | None,
    spent: Spent,
    progress: Callable[[StepMetrics], None] | None,
) -> Any:
    """The leg's ``TrainerCallback``: stops before a step that would pass ``max_completions``, stores the completions
    spent beside each TRL checkpoint (a resume counts them), and passes each step's `StepMetrics` to ``progress``."""
    from transformers import TrainerCallback

    class _LegCallback(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if max_completions is not None and spent.total + per_step > max_completions:
                control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            ckpt = trainer_dir / f"checkpoint-{state.global_step}"
            if ckpt.is_dir():
                (ckpt / LEG_STATE).write_text(json.dumps({"completions": spent.prior + spent.task.count}))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if progress is not None and logs and "reward" in logs:
                for m in step_metrics([{**logs, "step": state.global_step}], per_step):
                    progress(m)

    return _LegCallback()


def run_trainer(
    model: Any,
    tokenizer: Any,
    member_stops: list[list[str]],
    rewards: list[Any],
    args: Any,
    dataset: Any,
    peft_config: Any,
    callbacks: list[Any],
    resume: Path | None,
) -> Any:
    """Build TRL's ``GRPOTrainer`` and train (from ``resume``, a TRL checkpoint, if given); returns the trainer.
    Generation ends at the stop rule's end tokens (`whale_core.stops`), set on the model only while training."""
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    gen_cfg = model.generation_config
    saved_eos = gen_cfg.eos_token_id
    # TRL ends completions at the model's EOS ids (read at construction): the stop rule rollouts use (whale_core.stops)
    gen_cfg.eos_token_id = end_token_ids(tokenizer, model, member_stops)
    with quiet():
        try:
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=rewards,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=callbacks,
            )
            trainer.remove_callback(PrinterCallback)  # it prints every log dict; `progress` gets StepMetrics instead
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        finally:
            gen_cfg.eos_token_id = saved_eos
    return trainer
