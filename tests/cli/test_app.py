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


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"whale {version('whale')}"


RUNS_PROBE = """
import sys
from whale_cli.app import app
from typer.testing import CliRunner
res = CliRunner().invoke(app, ["runs"], terminal_width=200)
print(res.output)
print("HEAVY", sorted(m for m in ("torch", "mlflow", "prefect", "transformers") if m in sys.modules))
"""


def test_runs_lists_scores_durations_and_legs_without_heavy_imports(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    from whale_core.records.archive import Archive

    home = tmp_path / "home"
    env = {**os.environ, "WHALE_HOME": str(home), "COLUMNS": "200"}
    env.pop("WHALE_DB_URL", None)
    empty = subprocess.run([sys.executable, "-c", RUNS_PROBE], env=env, capture_output=True, text=True, check=True)
    assert "No runs yet" in empty.stdout and "whale run" in empty.stdout
    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    archive.create_run("r1", "whale-fixed", {}, run_id="r1")
    for i, (before, after) in enumerate(((0.07, 0.385), (0.385, 0.475))):
        leg = archive.start_leg("r1", i, "harness" if i == 0 else "weights", checkpoint_in="base")
        archive.finish_leg(leg.id, budget_used=10, metrics={"val_score": after, "val_score_before": before})
    archive.update_run("r1", status="finished")
    (home / "runs" / "r1").mkdir(parents=True)  # the archive holds no test evaluation: summary.json's scores
    (home / "runs" / "r1" / "summary.json").write_text(json.dumps({"test_initial": 0.062, "test_final": 0.504}))
    out = subprocess.run([sys.executable, "-c", RUNS_PROBE], env=env, capture_output=True, text=True, check=True)
    row = next(line for line in out.stdout.splitlines() if "r1" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:3] == ["r1", "whale-fixed", "finished"]
    assert cells[5:] == ["0.070 → 0.475", "0.062 → 0.504", "2"]
    assert "HEAVY []" in out.stdout
