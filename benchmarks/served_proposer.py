"""Served-proposer benchmark: a small local model as the harness proposer, against the offline mutate proposer.

For each proposer (``--proposers``, default ``served:smollm2-135m,mutate``) and search seed 1..``--seeds``, it runs
one harness leg exactly as ``whale search -c PROFILE --proposer P --seed S`` runs it (the same config resolution
and engine, in this process: the policy loads once; the served proposer's server starts once and is reused), on
the profile's problems and budget (default: ``whale_core/profiles/smollm2-arith.yaml``, candidates and rounds
as the profile sets them, so both proposers get the same number of candidates and the same halving). From the
archive it reads, per leg:

- proposals valid / total (a valid proposal passed every check and was scored; rejected ones carry their reasons),
  the rejection reasons, and whether a candidate was accepted (and its val score against the incumbent's);
- the proposer's spend: requests, fed-back retries, cut-off replies, prompt/completion tokens and seconds waited
  (the leg's ``proposer_*`` metrics), and seconds per proposal;
- the leg's wall time and completions.

It prints one side-by-side table (one row per proposer: the valid rate over all its legs, accepted legs, seconds
per proposal, mean tokens per request) and a line per leg. Results are appended to ``--out`` (JSON lines) and
reused on a rerun, so the comparison can be built up over several sittings.

    python benchmarks/served_proposer.py --seeds 3
    python benchmarks/served_proposer.py --seeds 1 --proposers served:smollm2-135m --set search.edit=whole  # before

Simplified: the leg runs on the base model (no weights leg before it); seconds depend on the machine's load, so the
load average at the start of each leg is recorded with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PROFILE = Path(__file__).resolve().parents[1] / "whale_core" / "profiles" / "smollm2-arith.yaml"


def _load(out: Path) -> dict[str, dict[str, Any]]:
    if not out.exists():
        return {}
    return {r["key"]: r for r in (json.loads(line) for line in out.read_text().splitlines() if line.strip())}


def _leg(profile: Path, proposer: str, seed: int, sets: list[str]) -> dict[str, Any]:
    """One harness leg as `whale search` runs it; what the archive recorded about it."""
    from whale_cli.common import leg_engine, resolve_config
    from whale_cli.search import search_defaults

    cfg = resolve_config(profile, [f"search.proposer={proposer}", *sets], defaults=search_defaults(), seed=seed)
    engine = leg_engine(cfg, "search", {"search": cfg.search.model_dump(), "suite": cfg.suite.name})
    t0 = time.perf_counter()
    result = engine.one_leg("harness", measure=False)
    seconds = time.perf_counter() - t0
    engine.rec.run_status("finished")
    res = result.harness_legs[-1]
    archive, run_id = engine.rec.archive, engine.run_id
    rows = archive.candidates(run_id)
    (leg,) = [x for x in archive.legs(run_id) if x.kind == "harness"]
    proposed = [r for r in rows if r.proposer != "revisit"]
    metrics = {k.removeprefix("proposer_"): v for k, v in leg.metrics.items() if k.startswith("proposer_")}
    return {
        "valid": sum(r.status != "rejected" for r in proposed),
        "total": len(proposed),
        "accepted": bool(res.accepted),
        "incumbent_val": res.incumbent_score,
        "winner_val": res.winner_score,
        "reasons": [r.reason for r in proposed if r.status == "rejected"],
        "proposer": metrics,
        "completions": res.completions,
        "seconds": round(seconds, 1),
        "run_id": run_id,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--proposers", default="served:smollm2-135m,mutate")
    ap.add_argument("--seeds", type=int, default=3, help="search seeds 1..N")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override (KEY=VALUE)")
    ap.add_argument("--out", type=Path, default=Path("benchmark-data/served-proposer/results.jsonl"))
    args = ap.parse_args()

    from whale_core.env import setup_offline_env

    setup_offline_env()
    done = _load(args.out)
    variant = " ".join(args.sets) or "defaults"
    table: list[tuple[str, list[dict[str, Any]]]] = []
    for proposer in [p.strip() for p in args.proposers.split(",") if p.strip()]:
        legs = []
        for seed in range(1, args.seeds + 1):
            key = "|".join([args.profile.name, proposer, variant, str(seed)])
            if key not in done:
                load = os.getloadavg()[0]
                row = {"key": key, "proposer_name": proposer, "variant": variant, "seed": seed, "load": load}
                row |= _leg(args.profile, proposer, seed, args.sets)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                done[key] = row
            legs.append(done[key])
        table.append((proposer, legs))

    print(f"\nprofile {args.profile.name}, variant: {variant}, seeds 1-{args.seeds}\n")
    head = f"{'proposer':<24} {'valid':>9} {'rate':>6} {'accepted':>9} {'s/proposal':>10} {'tok/request':>12}"
    print(head + "\n" + "-" * len(head))
    for proposer, legs in table:
        valid, total = sum(x["valid"] for x in legs), sum(x["total"] for x in legs)
        spent = [x["proposer"] for x in legs]
        requests = sum(m.get("requests", 0.0) for m in spent)
        waited = sum(m.get("latency_s", 0.0) for m in spent)
        tokens = sum(m.get("prompt_tokens", 0.0) + m.get("completion_tokens", 0.0) for m in spent)
        per = f"{waited / total:.1f}" if requests and total else "–"
        per_req = f"{tokens / requests:.0f}" if requests else "–"
        rate = f"{valid / total:.0%}" if total else "–"
        print(f"{proposer:<24} {f'{valid}/{total}':>9} {rate:>6} {sum(x['accepted'] for x in legs):>9} "
              f"{per:>10} {per_req:>12}")  # fmt: skip
    print()
    for proposer, legs in table:
        for x in legs:
            m = x["proposer"]
            winner = "–" if x["winner_val"] is None else f"{x['winner_val']:.3f}"
            print(
                f"{proposer} seed {x['seed']}: {x['valid']}/{x['total']} valid, "
                f"{'accepted' if x['accepted'] else 'kept'} (incumbent {x['incumbent_val']:.3f}, best {winner}), "
                f"{int(m.get('requests', 0))} requests ({int(m.get('retries', 0))} fed back, "
                f"{int(m.get('truncated', 0))} cut off), {x['completions']} completions, {x['seconds']:.0f} s, "
                f"load {x['load']:.1f}"
            )
            for reason in x["reasons"]:
                print(f"    rejected: {str(reason)[:150]}")


if __name__ == "__main__":
    sys.exit(main())
