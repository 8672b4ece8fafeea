"""Overhead of WHALE's weights leg over a bare TRL GRPOTrainer script: same model, data, rewards and steps.

    .venv/bin/python benchmarks/weights_leg_overhead.py [--model tiny] [--steps 100] [--repeats 1]
    .venv/bin/python benchmarks/weights_leg_overhead.py --model smollm2-135m (or a model dir) --steps 2 \
        --completions 64 --micro-batch-size 8 --gradient-checkpointing --fewshot 4 --max-digits 2

Both sides train the same policy (loaded fresh for each run) with the same harness-rendered train prompts, the same
rewards (task score, plus the similarity shaping when ``shaping_weight`` > 0), the same GRPOConfig knobs (completions
per step, micro-batch and gradient accumulation, activation checkpointing) and the same LoRA config. The bare side is
written plainly here against TRL and PEFT, without `whale_core.legs.weights_leg`. Each run is its own process (so each
side's peak RSS is its own), and both import the training libraries before their clock starts. Printed: both wall
times (dataset + trainer construction + training + saving the adapter), their ratio (target <= 1.05), seconds per step
(TRL's step_time: generation + loss + backward), peak RSS and both final rewards (task score averaged over the last 10
steps). Runs alternate (bare, whale, bare, whale, ...) and the best time of each side is kept, because the CPU is
shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from whale_core.env import setup_offline_env

setup_offline_env()


def bare_trl(model_name: str, harness: Any, suite: Any, cfg: Any, out: Path) -> tuple[float, float, float]:
    """A plain TRL + PEFT GRPO script. Returns (seconds, final task reward, mean seconds per step)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from whale_core.legs.rewards import similarity
    from whale_core.models import load_policy

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
    micro = cfg.micro_batch_size or cfg.per_device_train_batch_size
    newline = policy.tokenizer.encode("\n", add_special_tokens=False)
    policy.model.generation_config.eos_token_id = [policy.tokenizer.eos_token_id, *newline]
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=cfg.per_device_train_batch_size // micro,
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
        activation_checkpointing=cfg.gradient_checkpointing,
        reward_weights=[1.0, cfg.shaping_weight] if cfg.shaping_weight > 0 else None,
    )
    peft = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type="CAUSAL_LM",
    )
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
    logs = trainer.state.log_history
    rewards = [e["rewards/task_score/mean"] for e in logs if "rewards/task_score/mean" in e]
    step_times = [e["step_time"] for e in logs if "step_time" in e]
    return seconds, sum(rewards[-10:]) / len(rewards[-10:]), sum(step_times) / len(step_times)


def whale(model_name: str, harness: Any, suite: Any, cfg: Any, out: Path) -> tuple[float, float, float]:
    # The libraries the bare side imports before its clock starts (datasets, PEFT, TRL's trainer: ~1.5-2 s in a fresh
    # process, with pandas, pyarrow, mlflow ... behind them) are imported here too, so neither side times them: the
    # leg imports them lazily, and in its own process that one-off cost landed inside the WHALE side's time only.
    import datasets  # noqa: F401
    import peft  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401

    from whale_core.legs.weights_leg import train_weights_leg
    from whale_core.models import load_policy

    policy = load_policy(model_name, device="cpu")
    t0 = time.perf_counter()
    res = train_weights_leg(policy, harness, suite, cfg, out_dir=out)
    seconds = time.perf_counter() - t0
    tail = res.steps[-10:]
    return seconds, sum(m.reward_mean for m in tail) / len(tail), sum(m.seconds for m in res.steps) / len(res.steps)


def _setup(a: argparse.Namespace) -> tuple[Any, Any, Any]:
    import transformers

    from whale_core.harness import Harness
    from whale_core.legs.weights_leg import WeightsConfig
    from whale_core.suites import SuiteConfig, load_suite

    transformers.logging.set_verbosity_error()
    options = {"max_digits": a.max_digits} if a.max_digits else {}
    suite = load_suite(SuiteConfig(name="arith", options=options))
    harness = Harness.from_text(suite.seed_harness)
    if a.fewshot:  # a real model: the plain format with random train demos (where SmolLM2 scores best)
        harness = harness.evolve(fewshot={"k": a.fewshot})
    else:  # the tiny model's learnable format
        harness = harness.evolve(instruction="Add the two numbers. Write the sum reversed.", answer={"reverse": True})
    knobs: dict[str, Any] = {"steps": a.steps, "save_steps": a.steps + 1}  # no mid-leg checkpoint on either side
    if a.completions:
        knobs["per_device_train_batch_size"] = a.completions
    knobs |= {"micro_batch_size": a.micro_batch_size, "gradient_checkpointing": a.gradient_checkpointing}
    cfg = WeightsConfig(**knobs)  # otherwise the defaults
    if cfg.difficulty_filter is not None or not cfg.lora.enabled:
        raise SystemExit("the benchmark compares the LoRA path without the difficulty filter")
    return harness, suite, cfg


def _one(a: argparse.Namespace) -> None:
    """Child process: one run of one side; prints a JSON line."""
    harness, suite, cfg = _setup(a)
    fn = bare_trl if a.side == "bare" else whale
    seconds, reward, per_step = fn(a.model, harness, suite, cfg, Path(a.out))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"seconds": seconds, "reward": reward, "per_step": per_step, "rss_gb": peak}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="'tiny', a named model or a local HF model directory")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--completions", type=int, default=0, help="completions per step (default: the config default)")
    ap.add_argument("--micro-batch-size", type=int, default=None, help="completions per forward/backward pass")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--fewshot", type=int, default=0, help="k random train demos (plain format); 0: tiny's format")
    ap.add_argument("--max-digits", type=int, default=0, help="arith operand digits (0: the suite default)")
    ap.add_argument("--side", choices=["bare", "whale"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return _one(a)
    _, _, cfg = _setup(a)  # validate the knobs before spawning
    micro = cfg.micro_batch_size or cfg.per_device_train_batch_size
    print(f"model {a.model}: {cfg.per_device_train_batch_size} completions/step, micro-batch {micro}, "
          f"activation checkpointing {cfg.gradient_checkpointing}, {a.steps} steps")  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "whale": []}
    tmp = Path(tempfile.mkdtemp(prefix="whale-bench-"))
    forward = [x for x in sys.argv[1:]]
    try:
        for r in range(a.repeats):
            for name in ("bare", "whale"):
                cmd = [sys.executable, __file__, *forward, "--side", name, "--out", str(tmp / f"{name}-{r}")]
                done = subprocess.run(cmd, check=True, capture_output=True, text=True)
                res = json.loads(done.stdout.strip().splitlines()[-1])
                runs[name].append(res)
                print(f"run {r} {name:5s}: {res['seconds']:7.1f} s, {res['per_step']:6.2f} s/step, peak RSS "
                      f"{res['rss_gb']:.2f} GB, final task reward {res['reward']:.3f}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bare, ours = (min(runs[k], key=lambda x: x["seconds"]) for k in ("bare", "whale"))
    ratio = ours["seconds"] / bare["seconds"]
    print(
        f"bare TRL: {bare['seconds']:.1f} s   whale leg: {ours['seconds']:.1f} s   ratio {ratio:.3f} (target <= 1.05)"
    )
    print(f"s/step: bare {bare['per_step']:.2f}   whale {ours['per_step']:.2f}")
    print(f"peak RSS: bare {max(x['rss_gb'] for x in runs['bare']):.2f} GB   "
          f"whale {max(x['rss_gb'] for x in runs['whale']):.2f} GB")  # fmt: skip
    print(f"final task reward (mean of last 10 steps): bare {bare['reward']:.3f}   whale {ours['reward']:.3f}")


if __name__ == "__main__":
    main()
