"""`WeightsConfig`: LoRA settings in their own section (``weights.lora``), the old flat keys refused with the new
key's name, stored records of the old shape still read, and every key described for ``whale config --explain``."""

from __future__ import annotations

from pathlib import Path

import pytest

from whale_core.config import ConfigError, load_config, undescribed
from whale_core.legs.weights_config import LoraSettings, WeightsConfig, upgrade_lora_keys
from whale_core.legs.weights_leg import _same_leg

OLD_DEFAULTS = {"lora": True, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "lora_target_modules": "all-linear"}


def test_lora_is_a_section_with_the_old_defaults() -> None:
    lora = WeightsConfig().lora
    assert lora == LoraSettings(enabled=True, r=16, alpha=32, dropout=0.0, target_modules="all-linear")
    cfg = load_config(None, ["weights.lora.r=8", "weights.lora.target_modules=[q_proj, v_proj]"]).weights
    assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.target_modules) == (8, 32, ["q_proj", "v_proj"])
    assert load_config(None, ["weights.lora.enabled=false"]).weights.lora.enabled is False
    typo = r"unknown key 'weights\.lora\.alhpa' \(did you mean 'weights\.lora\.alpha'\?\)"
    with pytest.raises(ConfigError, match=typo):
        load_config(None, ["weights.lora.alhpa=8"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("weights.lora_r=8", "weights.lora_r moved to weights.lora.r"),
        ("weights.lora_alpha=8", "weights.lora_alpha moved to weights.lora.alpha"),
        ("weights.lora_dropout=0.1", "weights.lora_dropout moved to weights.lora.dropout"),
        ("weights.lora_target_modules=all-linear", "weights.lora_target_modules moved to weights.lora.target_modules"),
        ("weights.lora=false", "weights.lora: false moved to weights.lora.enabled"),
    ],
)
def test_an_old_flat_lora_key_names_its_new_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_an_old_flat_lora_key_in_a_yaml_file_names_its_new_key(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("weights:\n  steps: 3\n  lora: true\n  lora_r: 8\n")
    with pytest.raises(ConfigError, match=r"weights\.lora: true moved to weights\.lora\.enabled; weights\.lora_r"):
        load_config(path)


def test_records_of_the_old_shape_are_read() -> None:
    old = {"steps": 5, **OLD_DEFAULTS, "lora_r": 8}
    assert upgrade_lora_keys(old) == {"steps": 5, "lora": {"enabled": True, "r": 8, "alpha": 32, "dropout": 0.0,
                                                           "target_modules": "all-linear"}}  # fmt: skip
    assert upgrade_lora_keys({"steps": 5}) == {"steps": 5}
    new = WeightsConfig(steps=5, lora={"r": 8}).model_dump(mode="json")
    assert WeightsConfig.model_validate(upgrade_lora_keys(old)).model_dump(mode="json") == new
    # a leg dir written before the move is still the same leg (a resumed leg continues from its TRL checkpoints)
    spec = {"cfg": new, "harness": "h"}
    assert _same_leg({"cfg": old, "harness": "h"}, spec) and not _same_leg({"cfg": {**old, "lora_r": 4}}, spec)


def test_every_weights_key_is_described() -> None:
    assert undescribed(WeightsConfig) == []


def test_a_run_config_stored_before_the_lora_move_validates_after_upgrade() -> None:
    from whale_core.config import WhaleConfig, upgrade_stored

    stored = WhaleConfig().model_dump(mode="json")
    stored["weights"].pop("lora")
    stored["weights"].update({"lora": True, "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0})
    with pytest.raises(ValueError):  # the old shape is refused as it is (a user's config)
        WhaleConfig.model_validate(stored)
    cfg = WhaleConfig.model_validate(upgrade_stored(stored))  # resume / compare read it through upgrade_stored
    assert (cfg.weights.lora.enabled, cfg.weights.lora.r, cfg.weights.lora.alpha) == (True, 8, 16)
    assert upgrade_stored(cfg.model_dump(mode="json")) == cfg.model_dump(mode="json")  # today's shape: unchanged
