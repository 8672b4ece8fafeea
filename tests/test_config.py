"""Config: defaults that validate, YAML + overrides, and errors that name the key and list what is valid."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import pytest

from whale_core.config import (
    MODES,
    ConfigError,
    Follows,
    Mode,
    config_to_yaml,
    describe,
    flatten,
    load_config,
    parse_override,
    undescribed,
)


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


# ------------------------------------------------------------------- one schema (issue #19 item 7): precedence, docs
def test_precedence_flag_over_set_over_file_over_command_default(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  name: from-file\nrollout:\n  batch_size: 8\n")
    defaults = {"rollout.val_problems": 500, "rollout.batch_size": 16, "model.name": "from-default"}
    cfg = load_config(path, ["model.name=from-set"], flags={"model.name": "from-flag"}, defaults=defaults)
    assert cfg.model.name == "from-flag"
    cfg = load_config(path, ["model.name=from-set"], defaults=defaults)
    assert cfg.model.name == "from-set" and cfg.rollout.batch_size == 8  # the file beats the command's default
    assert cfg.rollout.val_problems == 500  # the command's default beats the schema's (200)
    assert load_config(None, defaults=defaults).model.name == "from-default"
    assert load_config().rollout.val_problems == 200
    # a flag's value is set as it is, never re-read as YAML (a model named "yes" stays a string)
    assert load_config(None, flags={"model.name": "yes"}).model.name == "yes"


def test_a_flag_with_a_bad_value_names_its_key() -> None:
    with pytest.raises(ConfigError, match=r"'rollout\.batch_size'"):
        load_config(None, flags={"rollout.batch_size": 0})


def test_modes_are_the_mode_type() -> None:
    assert get_args(Mode) == MODES and "whale-adaptive" in MODES and "prompt-weights" in MODES


def test_every_leaf_field_has_a_description() -> None:
    """Every key `whale config --explain` prints has a description; the message lists the ones still missing."""
    missing = undescribed()
    assert not missing, f"{len(missing)} config fields have no description: {', '.join(missing)}"


def test_describe_walks_every_section_with_types_bounds_and_defaults() -> None:
    docs = {d.key: d for d in describe()}
    assert docs["rollout.batch_size"].type == "int (>= 1, <= 4096)" and docs["rollout.batch_size"].default == "64"
    assert docs["model.name"].default == '"tiny"' and docs["harness"].type == "str | null"
    assert docs["mode"].type == " | ".join(MODES)
    assert docs["suite.sizes"].section and docs["suite.sizes.val"].default == "300"  # inside an optional section
    assert docs["schedule.phase.weights"].description and docs["budget.harness_share_cap"].default == "null"
    for section in ("model", "suite", "rollout", "weights", "search", "schedule", "budget", "tracking"):
        assert docs[section].section and docs[section].description
    # every key it lists is one a config file accepts: the flattened full config has exactly the leaf keys
    leaves = {k for k, d in docs.items() if not d.section or d.default == "null"}
    flat = set(flatten(load_config().model_dump(mode="json")))
    assert flat <= leaves, flat - leaves


def test_flatten_is_the_one_rule() -> None:
    data = {"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}, "f": None, "token": {"x": 1}}
    assert flatten(data) == {"a.b": 1, "a.c.d": [1, 2], "f": None, "token.x": 1}
    assert flatten({"b": 1}, "a.") == {"a.b": 1}
    kept = flatten(data, leaf=lambda key, value: not value or key == "token")
    assert kept == {"a.b": 1, "a.c.d": [1, 2], "e": {}, "f": None, "token": {"x": 1}}


def test_flatten_replaces_the_lineage_and_proposer_copies() -> None:
    """The replacements proposed for `records.lineage.flatten_params` and `proposers.base._flatten` (both built on
    `flatten`) give what those functions give, secrets, empty sections and prefixes included (compared with the
    public functions, so the test holds before and after the swap)."""
    import yaml

    from whale_core.harness import Harness
    from whale_core.proposers.base import changed_fields
    from whale_core.records import lineage
    from whale_core.suites import load_suite

    def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
        flat = flatten(config, prefix, leaf=lambda key, value: not value or lineage.is_secret_key(key))
        return {lineage._clean_key(k): _param_text(k[len(prefix) :], v) for k, v in flat.items()}

    def _param_text(key: str, value: Any) -> str:
        if lineage.is_secret_key(key):
            return lineage.REDACTED
        if isinstance(value, str):
            return lineage.redact_value(value)[: lineage._PARAM_MAX]
        if value is None or isinstance(value, bool | int | float):
            return str(value)[: lineage._PARAM_MAX]
        return lineage.redact_value(json.dumps(value, sort_keys=True, default=str))[: lineage._PARAM_MAX]

    full = load_config(None, ["search.api_key_env=MY_KEY"]).model_dump(mode="json")
    full["tracking"]["archive_url"] = "postgresql://u:pw@h/db"  # a config refuses one; the redaction still masks it
    samples: list[dict[str, Any]] = [
        full,
        {"search": {"api_key": {"nested": "x"}, "apiToken": "t", "empty": {}, "l": [1, {"a": 2}]}, "x y!": 1},
        {"a": {"b": {"c": "x" * 7000}}, "n": None, "f": 1.5, "t": True},
    ]
    for data in samples:
        for prefix in ("", "p."):
            assert flatten_params(data, prefix) == lineage.flatten_params(data, prefix)

    def fields_changed(old: Harness, new: Harness) -> list[str]:
        a, b = flatten(yaml.safe_load(old.text)), flatten(yaml.safe_load(new.text))
        return sorted(k for k in set(a) | set(b) if a.get(k, KeyError) != b.get(k, KeyError))

    seed = Harness.from_text(load_suite("arith").seed_harness)
    data = yaml.safe_load(seed.text)
    data["fewshot"]["k"] = 2
    data["decoding"]["stop"] = ["\n", "."]
    data["instruction"] = "Sum them."
    edited = Harness.from_text(yaml.safe_dump(data))
    assert fields_changed(seed, edited) == changed_fields(seed, edited) != []
    assert fields_changed(seed, seed) == changed_fields(seed, seed) == []


def test_a_follows_default_copies_the_resolved_key_unless_set(tmp_path: Path) -> None:
    """`whale eval`/`whale train`: the suite's problems follow the run seed (as before the one schema) unless set."""
    follow = {"suite.seed": Follows("seed")}
    assert load_config(None, flags={"seed": 3}, defaults=follow).suite.seed == 3
    assert load_config(None, ["seed=4"], defaults=follow).suite.seed == 4  # --set seed=4 is --seed 4
    assert load_config(None, ["suite.seed=1"], flags={"seed": 3}, defaults=follow).suite.seed == 1
    path = tmp_path / "c.yaml"
    path.write_text("seed: 5\nsuite: {name: sort, seed: 0}\n")
    assert load_config(path, defaults=follow).suite.seed == 0  # the file set it
    assert load_config(None).suite.seed == 0 and load_config(None, ["seed=2"]).suite.seed == 0  # a run: apart
    bad = tmp_path / "bad.yaml"
    bad.write_text("suite: arith\n")  # a default never papers over a section that is not a mapping
    with pytest.raises(ConfigError, match="'suite'"):
        load_config(bad, defaults={**follow, "suite.path": "x"})


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("search.timeout=.inf", "'search.timeout': Input should be a finite number"),
        ("search.served.timeout=inf", "'search.served.timeout': Input should be a finite number"),
        ("weights.learning_rate=.nan", "'weights.learning_rate': Input should be a finite number"),
        ("weights.steps=1000000000000", "'weights.steps': Input should be less than or equal to 1000000"),
        ("budget.total=1e30", "'budget.total'"),
        ("rollout.val_problems=99999999999", "'rollout.val_problems': Input should be less than or equal to"),
    ],
)
def test_infinite_and_absurd_values_are_refused_with_the_key(item: str, needle: str) -> None:
    """Issue 30, item 13: ``inf`` timeouts and learning rates and ``weights.steps=10**12`` were accepted."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [item])
    assert needle in str(err.value), str(err.value)


def test_a_config_path_that_is_a_directory_or_a_fifo_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory, not a regular file"):
        load_config(tmp_path)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
        load_config(fifo)  # before: blocked forever opening the FIFO


@pytest.mark.parametrize(
    "item",
    [
        "search.api_base=http://user:s3cret@127.0.0.1:9/v1",
        "tracking.archive_url=postgresql+psycopg2://whale:s3cret@127.0.0.1:5432/test",
        "tracking.mlflow_uri=postgresql://whale:s3cret@127.0.0.1/mlflow",
    ],
)
def test_a_password_in_a_config_url_is_refused_before_anything_stores_it(item: str) -> None:
    """Issue 30, item 4: a password inside ``search.api_base`` was redacted in MLflow but stored in plain text in
    prefect.db (flow-run parameters) and whale.db (the run's config). A config never holds one: the error names the
    key and where credentials go, and never repeats the value."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [item])
    msg = str(err.value)
    assert f"'{item.split('=')[0]}' holds a password" in msg and "s3cret" not in msg
    assert "search.api_key_env" in msg and "WHALE_DB_URL" in msg
    assert load_config(None, ["search.api_base=http://127.0.0.1:9/v1"]).search.api_base  # no password: fine
