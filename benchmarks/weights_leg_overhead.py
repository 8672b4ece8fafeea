"""Overhead of WHALE's weights leg over a bare TRL GRPOTrainer script: same model, data, rewards and steps.

    .venv/bin/python benchmarks/weights_leg_overhead.py [--model tiny] [--steps 100] [--repeats 1]

Both sides train the same policy (loaded fresh for each run) with the same harness-rendered train prompts, the same
rewards (task score, plus the similarity shaping when ``shaping_weight`` > 0), the same GRPOConfig knobs and the same
LoRA config. The bare side is written plainly here against TRL and PEFT, without `whale_core.weights`. Printed: both
wall times (dataset + trainer construction + training + saving the adapter), their ratio (target <= 1.05) and both
final rewards (task score averaged over the last 10 steps). Runs alternate (bare, whale, bare, whale, ...) and the
best time of each side is kept, because the CPU is shared and noisy.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from whale_core.env import setup_offline_env

setup_offline_env()


def bare_trl(model_name: str, harness: Any, suite: Any, cfg: Any, out: Path) -> tuple[float, float]:
    """A plain TRL + PEFT GRPO script. Returns (seconds, final task reward)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from whale_core.models import load_policy
    from whale_core.rewards import similarity

    policy = load_policy(model_name, device="cpu")
    t0 = time.perf_counter()
    train = list(suite.problems("train"))
    by_id = {p.id: p for p in train}

    def parsed(c: str) -> str | None:
        try:
            return harness.parse_answer(c)
        except Exception:
            return None

    def task_score(completions: list[str], problem_id: list[str], **_: Any) -> list[float]:
        return [suite.score(parsed(c), by_id[i]) for c, i in zip(completions, problem_id, strict=True)]

    def answer_similarity(completions: list[str], problem_id: list[str], **_: Any) -> list[float]:
        out = []
        for c, i in zip(completions, problem_id, strict=True):
            a = parsed(c)
            out.append(0.0 if a is None else similarity(a, by_id[i].answer))
        return out

    ds = Dataset.from_dict(
        {
            "prompt": [harness.render(p, harness.select_demos(p, train, cfg.seed)) for p in train],
            "problem_id": [p.id for p in train],
        }
    )
    newline = policy.tokenizer.encode("\n", add_special_tokens=False)
    policy.model.generation_config.eos_token_id = [policy.tokenizer.eos_token_id, *newline]
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        num_generations=cfg.num_generations,
        temperature=cfg.temperature,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        max_completion_length=harness.spec.decoding.max_new_tokens,
        seed=cfg.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        reward_weights=[1.0, cfg.shaping_weight] if cfg.shaping_weight > 0 else None,
    )
    peft = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(
        model=policy.model,
        reward_funcs=[task_score, answer_similarity] if cfg.shaping_weight > 0 else [task_score],
        args=args,
        train_dataset=ds,
        processing_class=policy.tokenizer,
        peft_config=peft,
    )
    trainer.remove_callback(PrinterCallback)  # no per-step log printing (the WHALE side prints nothing either)
    trainer.train()
    trainer.model.save_pretrained(str(out / "final"))
    seconds = time.perf_counter() - t0
    rewards = [e["rewards/task_score/mean"] for e in trainer.state.log_history if "rewards/task_score/mean" in e]
    return seconds, sum(rewards[-10:]) / len(rewards[-10:])


def whale(model_name: str, harness: Any, suite: Any, cfg: Any, out: Path) -> tuple[float, float]:
    from whale_core.models import load_policy
    from whale_core.weights import train_weights_leg

    policy = load_policy(model_name, device="cpu")
    t0 = time.perf_counter()
    res = train_weights_leg(policy, harness, suite, cfg, out_dir=out)
    seconds = time.perf_counter() - t0
    tail = res.steps[-10:]
    return seconds, sum(m.reward_mean for m in tail) / len(tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()

    import transformers

    from whale_core.harness import Harness
    from whale_core.suites import load_suite
    from whale_core.weights import WeightsConfig

    transformers.logging.set_verbosity_error()
    suite = load_suite("arith")
    harness = Harness.from_text(suite.seed_harness).evolve(
        instruction="Add the two numbers. Write the sum reversed.", answer={"reverse": True}
    )
    cfg = WeightsConfig(steps=a.steps, save_steps=a.steps + 1)  # defaults; no mid-leg checkpoint on either side
    if cfg.difficulty_filter is not None or not cfg.lora:
        raise SystemExit("the benchmark compares the LoRA path without the difficulty filter")
    times: dict[str, list[float]] = {"bare": [], "whale": []}
    final: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="whale-bench-"))
    try:
        for r in range(a.repeats):
            for name, fn in (("bare", bare_trl), ("whale", whale)):
                seconds, reward = fn(a.model, harness, suite, cfg, tmp / f"{name}-{r}")
                times[name].append(seconds)
                final[name] = reward
                print(f"run {r} {name:5s}: {seconds:7.1f} s, final task reward {reward:.3f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bare, ours = min(times["bare"]), min(times["whale"])
    print(f"bare TRL: {bare:.1f} s   whale leg: {ours:.1f} s   ratio {ours / bare:.3f} (target <= 1.05)")
    print(f"final task reward (mean of last 10 steps): bare {final['bare']:.3f}   whale {final['whale']:.3f}")


if __name__ == "__main__":
    main()
