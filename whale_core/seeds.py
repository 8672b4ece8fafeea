"""Seed derivation: every seed WHALE derives from a run's ``seed`` (and an iteration, a batch, a request), in one place.

A run has one seed (``seed:`` of the config). Each random draw downstream gets its own seed, derived from it by one
of the functions below, so that two draws never share a stream by accident and a rerun draws the same values. Each
function is the exact formula its call site used before this module existed (changing one changes results: the
sampled completions, the proposals, the train problems): keep them as they are, and add a new function for a new
draw rather than re-using one.

- integer seeds (`torch.manual_seed`, a server's ``seed`` request field, a rotation offset): `derive` and the named
  formulas `batch_seed`, `request_seed`, `rotation_start`, `proposer_seed`, `weights_leg_seed`;
- a `random.Random` keyed by a label and the seed's parts: `rng` (string seeds are hashed by `random` itself, stably
  across processes, unlike Python's ``hash``).
"""

from __future__ import annotations

import random

__all__ = [
    "batch_seed",
    "derive",
    "key",
    "proposer_seed",
    "request_seed",
    "rng",
    "rotation_start",
    "weights_leg_seed",
]

_PRIME = 1_000_003  # a multiplier that keeps (seed, part) pairs apart for parts < 1e6


def derive(seed: int, *parts: int) -> int:
    """``seed * 1_000_003 + parts[0]``, then the same step for each further part (Horner form): distinct for distinct
    ``(seed, *parts)`` while every part stays below 1_000_003. ``derive(seed)`` is ``seed``."""
    out = seed
    for p in parts:
        out = out * _PRIME + p
    return out


def batch_seed(seed: int, batch: int) -> int:
    """The torch seed of a rollout's ``batch``-th sampled generation batch (`whale_core.rollout`)."""
    return derive(seed, batch)


def request_seed(seed: int, iteration: int, index: int) -> int:
    """The ``seed`` field of a served proposer's ``index``-th request in ``iteration`` (`whale_core.proposers.served`);
    below 2**31, as servers take a signed 32-bit seed."""
    return (seed * _PRIME + iteration * 1_009 + index) % (2**31)


def rotation_start(seed: int, iteration: int, n: int) -> int:
    """Where an iteration's seeded rotation over ``n`` items starts (the compact proposer prompt's field focus,
    `whale_core.proposers.context.compact_focus`)."""
    return (seed * 7919 + iteration * 104729) % n


def proposer_seed(seed: int, iteration: int) -> int:
    """The seed of an iteration's harness proposer (``seed + iteration``; the flows seed `make_proposer` with it)."""
    return seed + iteration


def weights_leg_seed(seed: int, iteration: int) -> int:
    """The GRPO seed (``weights.seed``) of an iteration's weights leg: ``seed + 1000 * iteration``."""
    return seed + 1000 * iteration


def key(label: str, *parts: object) -> str:
    """The string key ``"label:part1:part2..."`` `rng` seeds with (stable across processes and Python versions)."""
    return ":".join([label, *(str(p) for p in parts)])


def rng(label: str, *parts: object) -> random.Random:
    """A `random.Random` seeded with `key` ``(label, *parts)``, e.g. ``rng("whale-filter", seed)`` is
    ``random.Random("whale-filter:<seed>")``."""
    return random.Random(key(label, *parts))
