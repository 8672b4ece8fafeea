"""`whale_core.seeds`: each named formula is the exact one its call site used before the module existed (a changed
seed changes sampled completions, proposals and train problems, so these values are pinned)."""

from __future__ import annotations

import random

from whale_core import seeds


def test_named_formulas_keep_their_call_sites_values() -> None:
    for seed in (0, 1, 7, 12345, 2**31 - 1):
        for it in (0, 1, 5, 99):
            for k in (0, 1, 3, 63):
                assert seeds.batch_seed(seed, k) == seed * 1_000_003 + k  # rollout's sampled batch
                assert seeds.request_seed(seed, it, k) == (seed * 1_000_003 + it * 1_009 + k) % 2**31  # served
                assert seeds.rotation_start(seed, it, k + 1) == (seed * 7919 + it * 104729) % (k + 1)  # compact focus
            assert seeds.proposer_seed(seed, it) == seed + it  # the flows' harness proposer
            assert seeds.weights_leg_seed(seed, it) == seed + 1000 * it  # grpo-update's GRPO seed
    assert 0 <= seeds.request_seed(2**40, 3, 1) < 2**31


def test_derive_is_horner_over_the_parts() -> None:
    assert seeds.derive(5) == 5
    assert seeds.derive(5, 2) == 5 * 1_000_003 + 2
    assert seeds.derive(5, 2, 3) == (5 * 1_000_003 + 2) * 1_000_003 + 3
    assert len({seeds.derive(s, a) for s in range(20) for a in range(20)}) == 400


def test_rng_is_random_seeded_with_the_label_and_parts() -> None:
    assert seeds.key("whale-demos", 3, "p-7") == "whale-demos:3:p-7"
    for label, parts in [("whale-filter", (0,)), ("whale-demos", (3, "p-7")), ("whale-tiny-eval", (0, 2))]:
        expected = random.Random(":".join([label, *map(str, parts)]))
        assert seeds.rng(label, *parts).random() == expected.random()
    assert seeds.rng("whale-filter", 4).sample(range(100), 5) == random.Random("whale-filter:4").sample(range(100), 5)
