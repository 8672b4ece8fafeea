"""Rollout throughput: `rollout()` vs raw batched ``model.generate`` vs a naive one-example-at-a-time loop.

All three run the same policy on the same prompts (``--n`` problems of the ``arith`` val split, the suite's seed
harness, greedy, ``max_new_tokens`` and stop from the harness):

- ``rollout``: the scorer as WHALE runs it — render + tokenize + batched generate + decode + parse + score;
- ``raw``: batched ``model.generate`` only, on prompts rendered and tokenized beforehand (not timed), same batch size,
  same generation config, prompts in their given order;
- ``naive``: per problem render, tokenize, generate, decode, parse, score (on ``--naive-n`` problems, timed, and
  reported as throughput and as the time it would take for ``--n``).

The three run in ``--repeats`` interleaved rounds after one untimed warm-up batch; the best time of each is kept (the
machine may be shared and noisy). Targets: rollout >= 0.8x raw throughput, >= 5x naive.

    python benchmarks/rollout_throughput.py [--model tiny] [--n 512] [--batch-size 64] [--naive-n 64] [--repeats 3]
    python benchmarks/rollout_throughput.py --model smollm2-135m (or a model dir) --n 128 --naive-n 16 --max-digits 2

All three end completions by the same rule (`whale_core.stops.end_token_ids`: the tokenizer's and the model's EOS ids
plus single-token stops), so none generates tokens another stops before. Peak RSS of the process is printed too.
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="'tiny' or a local HF model directory")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=512, help="problems for rollout and raw")
    ap.add_argument("--naive-n", type=int, default=64, help="problems for the naive loop (extrapolated to --n)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-digits", type=int, default=0, help="arith operand digits (0: the suite default)")
    args = ap.parse_args()

    from whale_core.env import setup_offline_env

    setup_offline_env()
    import torch
    from transformers import GenerationConfig

    from whale_core.harness import AnswerParseError, Harness
    from whale_core.models.policy import load_policy
    from whale_core.rollout import rollout
    from whale_core.stops import end_token_ids
    from whale_core.suites import SuiteConfig, load_suite

    policy = load_policy(args.model, device=args.device)
    options = {"max_digits": args.max_digits} if args.max_digits else {}
    sizes = {"train": 3000, "val": max(args.n, 300), "test": 500}
    suite = load_suite(SuiteConfig(name="arith", sizes=sizes, options=options))
    problems = list(suite.problems("val")[: args.n])
    harness = Harness.from_text(suite.seed_harness)
    tok, model, dev = policy.tokenizer, policy.model, policy.device
    d = harness.spec.decoding
    gcfg = GenerationConfig(
        max_new_tokens=d.max_new_tokens, do_sample=False, num_beams=1, pad_token_id=tok.pad_token_id,
        eos_token_id=end_token_ids(tok, model, [d.stop]),
    )  # fmt: skip
    print(f"model {policy.base_path.name} ({policy.policy_id}) on {dev}, torch threads {torch.get_num_threads()}")
    print(f"{len(problems)} problems, harness {harness.name}, batch size {args.batch_size}, greedy")

    def timed_rollout() -> tuple[float, Any]:
        t0 = time.perf_counter()
        r = rollout(policy, harness, suite, problems, batch_size=args.batch_size)
        return time.perf_counter() - t0, r

    prompts = [harness.render(p, []) for p in problems]
    encoded = [tok(p).input_ids for p in prompts]

    def raw() -> tuple[float, int]:
        t0, new = time.perf_counter(), 0
        with torch.inference_mode():
            for s in range(0, len(encoded), args.batch_size):
                batch = tok.pad({"input_ids": encoded[s : s + args.batch_size]}, return_tensors="pt")
                out = model.generate(**batch.to(dev), generation_config=gcfg)
                new += out.shape[0] * (out.shape[1] - batch["input_ids"].shape[1])
        return time.perf_counter() - t0, new

    def naive(items: list[Any]) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            for p in items:
                enc = tok(harness.render(p, []), return_tensors="pt").to(dev)
                out = model.generate(**enc, generation_config=gcfg)
                text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
                try:
                    answer: str | None = harness.parse_answer(text)
                except AnswerParseError:
                    answer = None
                suite.score(answer, p)
        return time.perf_counter() - t0

    rollout(policy, harness, suite, problems[: args.batch_size], batch_size=args.batch_size)  # warm-up
    naive_items = problems[: args.naive_n]
    times: dict[str, list[float]] = {"rollout": [], "raw": [], "naive": []}
    result: Any = None
    for _ in range(args.repeats):  # interleaved rounds, so the three see the same machine load; best of each kept
        t, result = timed_rollout()
        times["rollout"].append(t)
        times["raw"].append(raw()[0])
        times["naive"].append(naive(naive_items) * len(problems) / len(naive_items))
    t_roll, t_raw, t_naive = (min(times[k]) for k in ("rollout", "raw", "naive"))

    n = len(problems)
    print()
    print(f"{'':10} {'seconds':>9} {'problems/s':>11}")
    print(f"{'rollout':10} {t_roll:9.2f} {n / t_roll:11.1f}   (score {result.score:.3f})")
    print(f"{'raw':10} {t_raw:9.2f} {n / t_raw:11.1f}   (generate only, pre-tokenized)")
    print(f"{'naive':10} {t_naive:9.2f} {n / t_naive:11.1f}   ({len(naive_items)} problems timed, scaled to {n})")
    print()
    print(f"rollout / raw throughput:   {t_raw / t_roll:5.2f}x   (target >= 0.8x)")
    print(f"rollout / naive throughput: {t_naive / t_roll:5.2f}x   (target >= 5x)")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")


if __name__ == "__main__":
    main()
