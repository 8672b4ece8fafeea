"""The `whale` CLI: help that teaches, clean errors for bad input (no tracebacks), `config` printing."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from whale_cli.app import app

runner = CliRunner()


def test_help_lists_commands() -> None:
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    for cmd in ("run", "resume", "rerun", "eval", "train", "search", "deploy", "ui", "config"):
        assert cmd in res.output


def test_run_help_teaches() -> None:
    res = runner.invoke(app, ["run", "--help"])
    assert res.exit_code == 0 and "embedded default" in res.output and "--set" in res.output


def test_config_prints_full_defaults() -> None:
    res = runner.invoke(app, ["config", "--set", "weights.steps=7"])
    assert res.exit_code == 0
    assert "steps: 7" in res.output and "proposer: mutate" in res.output


def test_config_typo_is_a_clean_error() -> None:
    res = runner.invoke(app, ["config", "--set", "wieghts.steps=7"])
    assert res.exit_code == 2
    assert "unknown key 'wieghts'" in res.output and "did you mean 'weights'" in res.output
    assert "Traceback" not in res.output


def test_malformed_harness_is_a_clean_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("whale_harness: 1\nname: x\ntemplate: '{{ \"\".__class__ }}'\n")
    res = runner.invoke(app, ["eval", "--harness", str(bad), "-n", "1"])
    assert res.exit_code == 2
    assert "template" in res.output and "Traceback" not in res.output


def test_unknown_suite_is_a_clean_error() -> None:
    res = runner.invoke(app, ["eval", "--suite", "nope", "-n", "1"])
    assert res.exit_code == 2 and "arith" in res.output
