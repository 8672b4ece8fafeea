"""Harness-gap benchmark: how much of a hand-written harness's gain does the offline `whale search` find on its own?

For each task of `benchmarks/gap_tasks` (five tasks, each with a reference harness a person wrote by hand) and one
model, it measures on the task's test split (the first ``--test-n`` problems, suite seed 0):

- ``seed``: the suite's seed harness, ``reference``: the hand-written one;
- for each search seed: one harness leg exactly as ``whale search`` runs it (the same config resolution, command
  defaults and engine, in this process, so the model loads once), at its defaults (budget, proposer, space) unless
  ``--set`` says otherwise; its winner (the incumbent when nothing was accepted) is then scored on test.

It prints per task: seed, reference and found scores, **found gain / reference gain** (``(found - seed) /
(reference - seed)``, per seed, then the mean), completions the search spent; and the average ratio over tasks.
Results are appended to ``--out`` (JSON lines, one per measurement) and reused on a rerun with the same key, so a
long benchmark is built up over several sittings.

    python benchmarks/harness_gap.py --model smollm2-135m --seeds 3          # whale search as shipped
    python benchmarks/harness_gap.py --seeds 1 --set search.mutate_space=classic   # the space before issue 35
    python benchmarks/harness_gap.py --tasks sequence,unit --seeds 1 --set search.proposer=tpe --out /tmp/gap.jsonl

Simplified: the test scores are greedy single rollouts per harness (as `whale eval`); a task whose reference gain is
under 0.05 is reported without a ratio (the gain is within noise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gap_tasks.tasks import Task, tasks


def _key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


def _load(out: Path) -> dict[str, dict[str, Any]]:
    if not out.exists():
        return {}
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {r["key"]: r for r in rows}


def _append(out: Path, row: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _config(task: Task, model: str, seed: int, sets: list[str]) -> Any:
    from whale_cli.common import resolve_config
    from whale_cli.search import search_defaults

    overrides = [*task.overrides(), "suite.seed=0", *sets]
    return resolve_config(None, overrides, defaults=search_defaults(), model=model, seed=seed, data=task.data)


def _test_score(cfg: Any, harness_text: str, n: int) -> tuple[float, int]:
    from whale_core.harness import Harness
    from whale_core.records.refs import PolicyRef, load_cached
    from whale_core.rollout import rollout
    from whale_core.suites.registry import load_suite

    suite = load_suite(cfg.suite)
    policy = load_cached(PolicyRef.base(cfg.model.name, cfg.model.device))
    test = list(suite.problems("test"))[:n]
    res = rollout(policy, Harness.from_text(harness_text), suite, test, demo_pool=suite.problems("train"))
    return res.score, res.n


def _search(cfg: Any) -> tuple[str, int, bool, str]:
    """One harness leg as `whale search` runs it: (winner text, completions, accepted, reason)."""
    from whale_cli.common import leg_engine

    engine = leg_engine(cfg, "search", {"search": cfg.search.model_dump(), "suite": cfg.suite.name})
    result = engine.one_leg("harness", measure=False)
    engine.rec.run_status("finished")
    res = result.harness_legs[-1]
    return res.incumbent_out.text, res.completions, res.accepted, res.reason


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="a named model, 'tiny' or a local HF model directory")
    ap.add_argument("--tasks", default="sequence,unit,letter,choice,arith")
    ap.add_argument("--seeds", type=int, default=3, help="search seeds 1..N")
    ap.add_argument("--test-n", type=int, default=120, help="test problems per score")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override for the search")
    ap.add_argument("--data-dir", type=Path, default=Path("benchmark-data/harness-gap"))
    ap.add_argument("--out", type=Path, default=Path("benchmark-data/harness-gap/results.jsonl"))
    args = ap.parse_args()

    from whale_core.env import setup_offline_env

    setup_offline_env()
    done = _load(args.out)
    wanted = args.tasks.split(",")
    chosen = [t for t in tasks(args.data_dir) if t.name in wanted]
    unknown = sorted(set(wanted) - {t.name for t in chosen})
    if unknown:
        sys.exit(f"unknown task(s) {', '.join(unknown)}: choose from sequence, unit, letter, choice, arith")
    variant = " ".join(args.sets) or "defaults"
    summary: list[tuple[str, float | None]] = []
    for task in chosen:
        cfg0 = _config(task, args.model, 0, [])
        suite_seed = cfg0.suite  # the problems do not depend on the search seed (suite.seed=0)
        scores: dict[str, float] = {}
        for which in ("seed", "reference"):
            key = _key(args.model, task.name, which, args.test_n)
            if key not in done:
                from whale_core.suites.registry import load_suite

                text = load_suite(suite_seed).seed_harness if which == "seed" else task.reference.read_text()
                score, n = _test_score(cfg0, text, args.test_n)
                done[key] = {"key": key, "task": task.name, "kind": which, "score": score, "n": n}
                _append(args.out, done[key])
            scores[which] = done[key]["score"]
        found: list[dict[str, Any]] = []
        for s in range(1, args.seeds + 1):
            key = _key(args.model, task.name, "search", variant, s, args.test_n)
            if key not in done:
                cfg = _config(task, args.model, s, args.sets)
                t0 = time.perf_counter()
                text, completions, accepted, reason = _search(cfg)
                seconds = time.perf_counter() - t0
                score, n = _test_score(cfg0, text, args.test_n)
                done[key] = {
                    "key": key, "task": task.name, "kind": "search", "variant": variant, "seed": s, "score": score,
                    "n": n, "completions": completions, "accepted": accepted, "reason": reason,
                    "seconds": round(seconds, 1), "winner": text,
                }  # fmt: skip
                _append(args.out, done[key])
            found.append(done[key])
        gain = scores["reference"] - scores["seed"]
        ratios = [(f["score"] - scores["seed"]) / gain for f in found] if gain >= 0.05 else []
        mean = statistics.mean(ratios) if ratios else None
        why = "no searches" if gain >= 0.05 else "n/a (reference gain < 0.05)"
        summary.append((task.name, mean))
        print(
            f"{task.name:9s} seed {scores['seed']:.3f}  reference {scores['reference']:.3f}  found "
            + ", ".join(f"{f['score']:.3f}" for f in found)
            + f"  found/reference gain {', '.join(f'{r:.2f}' for r in ratios) or why}"
            + (f" (mean {mean:.2f})" if mean is not None else "")
            + f"  completions {', '.join(str(f['completions']) for f in found)}",
            flush=True,
        )
    means = [m for _, m in summary if m is not None]
    if means:
        print(
            f"average found/reference gain over {len(means)} task(s): {statistics.mean(means):.2f}; "
            f"lowest {min(means):.2f} ({min(summary, key=lambda x: x[1] if x[1] is not None else 9)[0]}); {variant}"
        )


if __name__ == "__main__":
    main()
