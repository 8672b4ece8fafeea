"""What legs cost, in completions, from a run's config: the one place these rules live.

- `min_completions`: the fewest completions a leg of a kind can do anything with. A weights leg: one GRPO step plus
  the val evaluation that follows it (the leg keeps that back, `reserve_after`). A harness leg: scoring the incumbent
  on the val problems plus every candidate on the first halving round — the least it can judge (a leg the
  budget cuts short is judged on the deepest round it paid for). With less left, the decider does not run the leg.
- `leg_costs`: about what one full weights leg and one full harness leg charge, for planning (a sweep's budget
  check): GRPO steps x completions per step (+ the difficulty filter's probes) + the val evaluation; the incumbent +
  successive halving over the candidates (`whale_core.legs.selection.successive_halving_plan`: each round scores the
  survivors up to its size) + the val evaluation of a winner.

Simplified: samples per problem are taken as 1, and a harness leg's revisited harnesses (`whale_core.ascent`) are not
counted (each adds one first-round block).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from whale_core.legs.selection import successive_halving_plan

if TYPE_CHECKING:
    from whale_core.config import WhaleConfig


def reserve_after(cfg: WhaleConfig) -> int:
    """Completions a weights leg keeps back from its budget for the val evaluation that follows it."""
    return cfg.rollout.val_problems


def min_completions(cfg: WhaleConfig, kind: str) -> int:
    """The fewest completions a leg of ``kind`` can do anything with (see the module docstring)."""
    if kind == "weights":
        return cfg.weights.per_device_train_batch_size + reserve_after(cfg)
    val = cfg.rollout.val_problems
    return val + cfg.search.candidates * min(cfg.search.rounds[0], val)


def leg_costs(cfg: WhaleConfig) -> tuple[int, int]:
    """About how many completions one weights leg and one harness leg charge (see the module docstring)."""
    w = cfg.weights
    weights = w.steps * w.per_device_train_batch_size + cfg.rollout.val_problems
    if w.difficulty_filter is not None:
        weights += w.difficulty_filter.max_problems * w.difficulty_filter.samples
    harness, done = cfg.rollout.val_problems, 0
    for rnd in successive_halving_plan(cfg.search.candidates, cfg.search.rounds, cfg.search.keep_fraction):
        harness += rnd.n_candidates * (rnd.size - done)
        done = rnd.size
    return weights, harness + cfg.rollout.val_problems
