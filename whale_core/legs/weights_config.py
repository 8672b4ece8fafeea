"""The weights leg's configuration (`WeightsConfig`, section ``weights`` of a WHALE config), its LoRA section
(`LoraSettings`, ``weights.lora``) and the difficulty filter's (`DifficultyFilter`). Defaults are the tuned tiny-model
recipe (docs/weights-leg.md); `whale_core.legs.weights_leg` turns them into TRL's ``GRPOConfig``.

Batch sizes: ``per_device_train_batch_size`` keeps WHALE's meaning, the completions of one optimizer step (one
generation batch: TRL's ``generation_batch_size``), so the budget and the seeds do not depend on memory settings;
``micro_batch_size`` is how many of them go through one forward/backward pass (TRL's ``per_device_train_batch_size``,
the step's gradient accumulated over ``per_device_train_batch_size // micro_batch_size`` passes). A real model needs
a micro-batch and ``gradient_checkpointing`` to fit in memory (docs/weights-leg.md, "Memory on a real model").

LoRA: ``weights.lora`` is a section (``enabled``, ``r``, ``alpha``, ``dropout``, ``target_modules``). The flat keys it
replaced (``weights.lora: true``, ``weights.lora_r``, ...) are refused with the new key's name; `upgrade_lora_keys`
reads records written before the move.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from whale_core.legs.population import PopulationConfig

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
Scheduler = Literal["constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr"]

__all__ = [
    "DifficultyFilter",
    "LoraSettings",
    "WeightsConfig",
    "completions_per_step",
    "micro_batching",
    "upgrade_lora_keys",
]


class DifficultyFilter(BaseModel):
    """Keep train problems whose sampled base accuracy lies in ``[low, high]`` (the learnable band).

    Probes ``max_problems`` train problems (seeded sample) with ``samples`` completions each at the leg's temperature,
    scored against the train split's gold answers only. Cost: ``max_problems * samples`` extra completions, counted.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    low: float = Field(0.1, ge=0.0, le=1.0, description="lowest sampled accuracy a kept problem may have")
    high: float = Field(0.6, ge=0.0, le=1.0, description="highest sampled accuracy a kept problem may have")
    samples: int = Field(8, ge=1, le=64, description="completions per probed problem")
    max_problems: int = Field(512, ge=1, le=1_000_000, description="train problems probed (a seeded sample)")
    min_keep: int = Field(16, ge=1, le=1_000_000, description="fewer survivors than this: train on all probed problems")


class LoraSettings(BaseModel):
    """LoRA adapter of the weights leg (PEFT ``LoraConfig``); ``enabled: false`` trains every weight instead."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(True, description="train a LoRA adapter (false: full fine-tuning of every weight)")
    r: int = Field(16, ge=1, le=4096, description="adapter rank")
    alpha: int = Field(32, ge=1, le=65536, description="LoRA alpha: the adapter's update is scaled by alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input")
    target_modules: str | list[str] = Field(
        "all-linear", description="modules that get an adapter: PEFT's 'all-linear' or a list of module names"
    )


# Flat keys of the weights section before LoRA got its own section, and where each went.
_MOVED = {
    "lora_r": "lora.r",
    "lora_alpha": "lora.alpha",
    "lora_dropout": "lora.dropout",
    "lora_target_modules": "lora.target_modules",
}


def _moved_keys(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(old key, new key) of each pre-section LoRA key in a ``weights`` mapping (``lora: true/false`` included)."""
    out = [(old, new) for old, new in _MOVED.items() if old in data]
    if isinstance(data.get("lora"), bool):
        out.insert(0, (f"lora: {str(data['lora']).lower()}", "lora.enabled"))
    return out


def upgrade_lora_keys(weights: Mapping[str, Any]) -> dict[str, Any]:
    """A ``weights`` mapping written before LoRA got its own section (flat ``lora``, ``lora_r``, ``lora_alpha``,
    ``lora_dropout``, ``lora_target_modules``), with those keys moved into ``lora``; others are returned as they are.
    For stored records only (a weights leg's ``leg_spec.json``, a stored run config): a user's config with the old
    keys is refused with the new key's name."""
    out = dict(weights)
    if not _moved_keys(out):
        return out
    section = dict(out["lora"]) if isinstance(out.get("lora"), Mapping) else {}
    if isinstance(out.get("lora"), bool):
        section["enabled"] = out["lora"]
    for old, new in _MOVED.items():
        if old in out:
            section[new.split(".", 1)[1]] = out.pop(old)
    out["lora"] = section
    return out


class WeightsConfig(BaseModel):
    """The weights leg's knobs. Defaults are the tuned tiny-model recipe (docs/weights-leg.md)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    steps: int = Field(
        300, ge=1, le=1_000_000, description="GRPO optimizer steps of one leg (fewer when the budget runs out)"
    )
    learning_rate: float = Field(2e-4, gt=0, le=1.0, description="peak learning rate")
    num_generations: int = Field(4, ge=2, le=4096, description="group size G (completions per prompt)")
    per_device_train_batch_size: int = Field(
        64,
        ge=2,
        le=1_000_000,
        description="completions per optimizer step (one generation batch); a multiple of num_generations",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="completions per forward/backward pass (gradients accumulate over the step); must divide "
        "per_device_train_batch_size; None: the whole step in one pass",
    )
    temperature: float = Field(0.5, gt=0, le=10.0, description="exploration temperature (not the harness's)")
    beta: float = Field(
        0.0, ge=0, le=100.0, description="KL penalty coefficient against the reference policy (0: no KL term)"
    )
    loss_type: LossType = Field("dapo", description="GRPO loss variant (TRL's loss_type)")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="advantage scaling (TRL)")
    lora: LoraSettings = Field(
        default_factory=LoraSettings, description="LoRA adapter settings (lora.enabled: false trains every weight)"
    )
    lr_scheduler_type: Scheduler = Field("constant", description="learning-rate schedule")
    warmup_steps: int = Field(0, ge=0, le=1_000_000, description="learning-rate warm-up steps")
    max_completion_length: int | None = Field(
        None, ge=1, le=65536, description="None: the harness's decoding.max_new_tokens"
    )
    shaping_weight: float = Field(
        0.0, ge=0, le=100.0, description="weight of the similarity shaping reward; 0 disables it"
    )
    difficulty_filter: DifficultyFilter | None = Field(
        None, description="train only on problems the start policy sometimes solves (None: every train problem)"
    )
    population: PopulationConfig = Field(
        default_factory=PopulationConfig, description="mitigation: train on prompts of the archive's top-k harnesses"
    )
    save_steps: int = Field(
        100, ge=1, le=1_000_000, description="TRL checkpoint every this many steps (a killed leg resumes there)"
    )
    seed: int = Field(0, description="GRPO seed (a run's legs use weights_leg_seed(run seed, iteration))")
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass (less memory, more compute per pass)"
    )
    bf16: bool | None = Field(None, description="None: on for CUDA with bf16 support, off on CPU")
    use_vllm: bool = Field(False, description="GPU only: TRL's vLLM generation (needs vllm installed)")
    vllm_mode: Literal["colocate", "server"] = Field("colocate", description="how TRL runs vLLM (use_vllm only)")
    keep_trainer_checkpoints: bool = Field(False, description="keep out_dir/trainer/ after the leg finished")
    extra: dict[str, Any] = Field(default_factory=dict, description="raw GRPOConfig overrides")

    @model_validator(mode="before")
    @classmethod
    def _refuse_moved_keys(cls, data: Any) -> Any:
        """An old flat LoRA key is an error naming its new key (``weights.lora_r moved to weights.lora.r``)."""
        if isinstance(data, Mapping) and (moved := _moved_keys(data)):
            text = "; ".join(f"weights.{old} moved to weights.{new}" for old, new in moved)
            raise PydanticCustomError("moved_key", "{moved}", {"moved": text})
        return data

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
