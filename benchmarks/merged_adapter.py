"""Rollouts under a trained LoRA policy: the adapter as PEFT layers (before) vs merged into the weights (after).

After a weights leg, every rollout of the run (the next harness leg's candidates, the val and test scores) runs the
trained policy. Loaded with its adapter as PEFT layers, each adapted linear layer adds two small matmuls and Python
per call: on SmolLM2-135M on a CPU that was half of such a rollout's time (py-spy, docs/real-model.md). WHALE's
inference policies now merge the adapter (`load_policy(merge_adapter=True)`, what `PolicyRef.load` does for
rollouts). This script runs the same `rollout()` — same harness, problems, batch size, seed — with both policies,
interleaved over ``--repeats`` rounds after an untimed warm-up (the best time of each kept: the machine may be
shared), and prints seconds, the ratio, and the two scores and how many completions differ.

    python benchmarks/merged_adapter.py --model smollm2-135m --adapter RUN/iter-01-weights/gen-0/checkpoint \\
        --harness RUN/final_harness.yaml --n 100 --max-digits 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a named model or a local HF model directory")
    ap.add_argument("--adapter", type=Path, required=True, help="a LoRA adapter directory (a weights leg's checkpoint)")
    ap.add_argument("--harness", type=Path, help="harness YAML (default: the suite's seed harness)")
    ap.add_argument("--n", type=int, default=100, help="val problems")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-digits", type=int, default=2)
    args = ap.parse_args()

    from whale_core.env import setup_offline_env
    from whale_core.harness import Harness
    from whale_core.models import load_policy
    from whale_core.rollout import rollout
    from whale_core.suites import SuiteConfig, load_suite

    setup_offline_env()
    suite = load_suite(SuiteConfig(name="arith", options={"max_digits": args.max_digits}))
    harness = Harness.from_file(args.harness) if args.harness else Harness.from_text(suite.seed_harness)
    problems, pool = list(suite.problems("val"))[: args.n], suite.problems("train")
    policies = {
        "peft layers (before)": load_policy(args.model, adapter=args.adapter, device="cpu"),
        "merged (after)": load_policy(args.model, adapter=args.adapter, device="cpu", merge_adapter=True),
    }
    best: dict[str, float] = {}
    results = {}
    for policy in policies.values():  # warm-up: one untimed batch each
        rollout(policy, harness, suite, problems[: args.batch_size], demo_pool=pool, batch_size=args.batch_size)
    for _ in range(args.repeats):
        for name, policy in policies.items():
            t0 = time.perf_counter()
            results[name] = rollout(policy, harness, suite, problems, demo_pool=pool, batch_size=args.batch_size)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    before, after = (results[k] for k in policies)
    differ = sum(a.completions != b.completions for a, b in zip(before.traces, after.traces, strict=True))
    print(f"\n{args.n} problems, batch {args.batch_size}, harness {harness.name}, best of {args.repeats}:")
    for name in policies:
        print(f"  {name:<22} {best[name]:7.1f} s   score {results[name].score:.3f}")
    print(f"  speed-up {best['peft layers (before)'] / best['merged (after)']:.2f}x; completions that differ: "
          f"{differ} of {len(after.traces)}")  # fmt: skip


if __name__ == "__main__":
    main()
