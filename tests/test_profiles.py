"""Run profiles shipped with WHALE (whale_core/profiles): each one is package data and a valid config."""

from __future__ import annotations

from importlib import resources

import pytest

from whale_core.config import load_config

PROFILES = sorted(p.name for p in resources.files("whale_core.profiles").iterdir() if p.name.endswith(".yaml"))


def test_the_smollm2_profile_ships() -> None:
    assert "smollm2-arith.yaml" in PROFILES


@pytest.mark.parametrize("name", PROFILES)
def test_profile_is_a_valid_config(name: str) -> None:
    with resources.as_file(resources.files("whale_core.profiles") / name) as path:
        cfg = load_config(path)
    assert cfg.model.name != "tiny"  # a profile is for a real model
    assert cfg.weights.per_device_train_batch_size % (cfg.weights.micro_batch_size or 1) == 0
    assert max(cfg.search.rounds) <= cfg.rollout.val_problems


def test_smollm2_profile_is_the_learnable_band() -> None:
    with resources.as_file(resources.files("whale_core.profiles") / "smollm2-arith.yaml") as path:
        cfg = load_config(path)
    assert (cfg.model.name, cfg.suite.name, cfg.suite.options) == ("smollm2-135m", "arith", {"max_digits": 2})
