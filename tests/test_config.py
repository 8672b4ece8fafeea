"""Config: defaults that validate, YAML + overrides, and errors that name the key and list what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from whale_core.config import ConfigError, config_to_yaml, load_config, parse_override


def test_defaults_validate_and_round_trip(tmp_path: Path) -> None:
    cfg = load_config()
    assert cfg.mode == "whale-fixed" and cfg.model.name == "tiny" and cfg.suite.name == "arith"
    path = tmp_path / "c.yaml"
    path.write_text(config_to_yaml(cfg))
    assert load_config(path) == cfg


def test_overrides_on_top_of_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("weights:\n  steps: 10\nsearch:\n  candidates: 3\n")
    cfg = load_config(path, ["weights.steps=20", "suite.sizes={train: 10, val: 5, test: 5}"])
    assert cfg.weights.steps == 20 and cfg.search.candidates == 3
    assert cfg.suite.sizes is not None and cfg.suite.sizes.val == 5


def test_unknown_key_names_it_and_suggests() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["weights.learning_rat=1e-4"])
    msg = str(err.value)
    assert "weights.learning_rat" in msg and "did you mean 'weights.learning_rate'" in msg
    assert "valid keys here:" in msg and "num_generations" in msg


def test_bad_enum_lists_valid_values() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["mode=whale"])
    assert "'mode'" in str(err.value) and "whale-adaptive" in str(err.value) and "prompt-weights" in str(err.value)


def test_bad_types_and_ranges() -> None:
    with pytest.raises(ConfigError, match=r"search\.rounds"):
        load_config(None, ["search.rounds=[100, 50]"])
    with pytest.raises(ConfigError, match="iterations"):
        load_config(None, ["iterations=0"])
    # keeping every candidate would never halve: refused on load, not by a crash inside a harness leg
    with pytest.raises(ConfigError, match=r"search\.keep_fraction"):
        load_config(None, ["search.keep_fraction=1.0"])


def test_override_syntax_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("weights.steps")
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_config_not_utf8_or_unreadable_names_the_file(tmp_path: Path) -> None:
    """Before: a 0xff byte raised UnicodeDecodeError (and the file was read in the locale's encoding)."""
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("seed: 3\nrun_name: café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml is not valid UTF-8 \(byte 0xe9 at offset 21\)"):
        load_config(bad)
    good = tmp_path / "utf8.yaml"
    good.write_bytes("seed: 3\n# café\n".encode())
    assert load_config(good).seed == 3
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1\n")
    with pytest.raises(ConfigError) as info:
        load_config(broken)
    assert "broken.yaml is not valid YAML" in str(info.value) and "\n" not in str(info.value)


def test_override_from_non_utf8_argv_is_a_config_error(tmp_path: Path) -> None:
    """``whale run --set run_name=$'caf\\xe9'``: Python decodes the argv byte as a lone surrogate, which no store
    can write (before: accepted, then UnicodeEncodeError wherever it was written)."""
    item = b"suite.name=caf\xe9".decode("utf-8", "surrogateescape")
    with pytest.raises(ConfigError, match="is not valid UTF-8 text") as info:
        load_config(None, [item])
    str(info.value).encode("utf-8")  # the message itself is printable
