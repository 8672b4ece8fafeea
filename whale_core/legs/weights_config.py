"""The weights leg's configuration (`WeightsConfig`, section ``weights`` of a WHALE config) and the difficulty
filter's (`DifficultyFilter`). Defaults are the tuned tiny-model recipe (docs/weights-leg.md);
`whale_core.legs.weights_leg` turns them into TRL's ``GRPOConfig``.

Batch sizes: ``per_device_train_batch_size`` keeps WHALE's meaning, the completions of one optimizer step (one
generation batch: TRL's ``generation_batch_size``), so the budget and the seeds do not depend on memory settings;
``micro_batch_size`` is how many of them go through one forward/backward pass (TRL's ``per_device_train_batch_size``,
the step's gradient accumulated over ``per_device_train_batch_size // micro_batch_size`` passes). On a real model
(SmolLM2-135M: 49k vocabulary, 30 layers) the activations of 64 completions in one pass need >20 GB; a micro-batch
of 8 with ``gradient_checkpointing`` fits in a few GB (docs/weights-leg.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from whale_core.legs.population import PopulationConfig

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
Scheduler = Literal["constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr"]

__all__ = ["DifficultyFilter", "WeightsConfig", "completions_per_step", "micro_batching"]


class DifficultyFilter(BaseModel):
    """Keep train problems whose sampled base accuracy lies in ``[low, high]`` (the learnable band).

    Probes ``max_problems`` train problems (seeded sample) with ``samples`` completions each at the leg's temperature,
    scored against the train split's gold answers only. Cost: ``max_problems * samples`` extra completions, counted.
    """

    model_config = ConfigDict(extra="forbid")

    low: float = Field(0.1, ge=0.0, le=1.0)
    high: float = Field(0.6, ge=0.0, le=1.0)
    samples: int = Field(8, ge=1, le=64)
    max_problems: int = Field(512, ge=1)
    min_keep: int = Field(16, ge=1, description="fewer survivors than this: train on all probed problems")


class WeightsConfig(BaseModel):
    """The weights leg's knobs. Defaults are the tuned tiny-model recipe (docs/weights-leg.md)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(300, ge=1)
    learning_rate: float = Field(2e-4, gt=0)
    num_generations: int = Field(4, ge=2, description="group size G (completions per prompt)")
    per_device_train_batch_size: int = Field(
        64, ge=2, description="completions per optimizer step (one generation batch); a multiple of num_generations"
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="completions per forward/backward pass (gradients accumulate over the step); must divide "
        "per_device_train_batch_size; None: the whole step in one pass",
    )
    temperature: float = Field(0.5, gt=0, description="exploration temperature (not the harness's)")
    beta: float = Field(0.0, ge=0)
    loss_type: LossType = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="advantage scaling (TRL)")
    lora: bool = True
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: str | list[str] = "all-linear"
    lr_scheduler_type: Scheduler = "constant"
    warmup_steps: int = Field(0, ge=0)
    max_completion_length: int | None = Field(None, ge=1, description="None: the harness's decoding.max_new_tokens")
    shaping_weight: float = Field(0.0, ge=0, description="weight of the similarity shaping reward; 0 disables it")
    difficulty_filter: DifficultyFilter | None = None
    population: PopulationConfig = Field(
        default_factory=PopulationConfig, description="mitigation: train on prompts of the archive's top-k harnesses"
    )
    save_steps: int = Field(100, ge=1)
    seed: int = 0
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass (less memory, ~30 % more compute per pass)"
    )
    bf16: bool | None = Field(None, description="None: on for CUDA with bf16 support, off on CPU")
    use_vllm: bool = Field(False, description="GPU only: TRL's vLLM generation (needs vllm installed)")
    vllm_mode: Literal["colocate", "server"] = "colocate"
    keep_trainer_checkpoints: bool = Field(False, description="keep out_dir/trainer/ after the leg finished")
    extra: dict[str, Any] = Field(default_factory=dict, description="raw GRPOConfig overrides")

    @model_validator(mode="after")
    def _check(self) -> WeightsConfig:
        if self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) must be a multiple of "
                f"num_generations ({self.num_generations})"
            )
        c, m = self.per_device_train_batch_size, self.micro_batch_size
        if m is not None and c % m:
            valid = ", ".join(str(d) for d in range(1, c + 1) if c % d == 0)
            raise ValueError(
                f"micro_batch_size ({m}) must divide per_device_train_batch_size ({c}); valid values: {valid}"
            )
        f = self.difficulty_filter
        if f is not None and f.low > f.high:
            raise ValueError(f"difficulty_filter: low ({f.low}) must be <= high ({f.high})")
        return self


def completions_per_step(cfg: WeightsConfig) -> int:
    """Completions TRL generates per optimizer step (single process): one generation batch of
    ``per_device_train_batch_size``, re-used for ``num_iterations`` steps when ``extra`` sets it. The micro-batch
    does not change it."""
    iters = int(cfg.extra.get("num_iterations", 1))
    return max(1, cfg.per_device_train_batch_size // iters)


def micro_batching(cfg: WeightsConfig) -> tuple[int, int]:
    """TRL's ``(per_device_train_batch_size, gradient_accumulation_steps)`` for the leg: completions per pass and
    passes per optimizer step (TRL's ``steps_per_generation`` defaults to the latter, so one generation batch holds
    the step's ``per_device_train_batch_size`` completions)."""
    micro = cfg.micro_batch_size or cfg.per_device_train_batch_size
    return micro, cfg.per_device_train_batch_size // micro
