"""One schema for YAML and flags (issue #19 item 7): every command that runs something takes ``--config``/``--set``;
its short flags are aliases of config keys declared once (`whale_cli.common.ALIASES`) and resolved by one function
(flag > --set > file > defaults); ``whale config --explain`` lists every key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from whale_cli import common
from whale_cli.app import app
from whale_cli.guard import CliError
from whale_core.config import describe

runner = CliRunner()
CONFIG_COMMANDS = ("eval", "train", "search", "run", "compare", "deploy", "config")


def _options(name: str) -> dict[str, Any]:
    """The command's options by parameter name (Typer's own click types)."""
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params if p.param_type_name == "option" and p.name}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_every_config_command_takes_config_and_set_and_shows_the_precedence(name: str) -> None:
    opts = _options(name)
    assert opts["config"].opts == ["--config", "-c"] and opts["set_"].opts == ["--set"] and opts["set_"].multiple
    res = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "flag > --set > --config file > defaults" in " ".join(res.output.split())


def test_every_alias_names_a_config_key_and_its_real_default() -> None:
    docs = {d.key: d for d in describe()}
    for name, alias in common.ALIASES.items():
        assert alias.key in docs and not docs[alias.key].section, name
        shown = alias.help.rsplit("default: ", 1)[1].split(" ")[0]
        default = json.loads(docs[alias.key].default)
        assert shown == ("null" if default is None else str(default)), (name, shown, default)


def test_alias_flags_are_declared_by_the_table() -> None:
    """A command's parameter named like an alias has exactly the alias's flags and help (no hand-wired variant)."""
    for name in CONFIG_COMMANDS:
        for pname, opt in _options(name).items():
            if pname in common.ALIASES:
                alias = common.ALIASES[pname]
                assert tuple(opt.opts + opt.secondary_opts) == alias.flags, (name, pname)
                assert alias.key in (opt.help or "") and opt.default is None, (name, pname)


class _Stop(CliError):
    pass


ALIAS_VALUES = {
    "model": "m",
    "suite": "s",
    "data": "d.jsonl",
    "harness": "h.yaml",
    "seed": "3",
    "device": "cpu",
    "adapter": "a",
    "batch_size": "5",
    "steps": "7",
    "val_problems": "9",
    "mode": "weights-only",
    "proposer": "p",
    "api_base": "http://b",
    "candidates": "4",
}
# the commands that resolve a config and offer alias flags (`whale search` joins once it takes --config)
RESOLVING = [
    name
    for name in typer.main.get_command(app).commands  # type: ignore[attr-defined]
    if "config" in _options(name) and set(_options(name)) & set(common.ALIASES)
]


def test_the_resolving_commands_are_known() -> None:
    assert {"eval", "train", "run"} <= set(RESOLVING)


@pytest.mark.parametrize("name", RESOLVING)
def test_every_alias_flag_reaches_resolve_config(name: str, monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Each alias flag a command offers is handed to `resolve_config` under its table name (none forgotten)."""
    import importlib

    module = importlib.import_module(f"whale_cli.{name}")
    seen: dict[str, Any] = {}

    def capture(config: Any, sets: Any, *, defaults: Any = None, **flags: Any) -> Any:
        seen.update(flags)
        raise _Stop("stop")

    monkeypatch.setattr(module, "resolve_config", capture)
    monkeypatch.setattr(module, "start_prefect_server", lambda: None, raising=False)
    args: list[str] = [name]
    offered = {}
    for pname, opt in _options(name).items():
        if pname in common.ALIASES:
            flag = "-n" if pname == "val_problems" else opt.opts[0]
            args += [flag, ALIAS_VALUES[pname]]
            offered[pname] = ALIAS_VALUES[pname]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "stop" in res.output, res.output
    assert offered and {k: str(v) for k, v in seen.items()} == offered


def test_resolve_config_maps_flags_to_keys_with_precedence(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model: {name: file, device: cpu}\nseed: 1\nharness: from-file.yaml\n")
    cfg = common.resolve_config(path, ["model.name=set", "seed=2"], model="flag", seed=None, harness=Path("h.yaml"))
    assert (cfg.model.name, cfg.model.device, cfg.seed, cfg.harness) == ("flag", "cpu", 2, "h.yaml")
    cfg = common.resolve_config(path, None, defaults={"rollout.val_problems": 500}, steps=11, val_problems=None)
    assert (cfg.model.name, cfg.weights.steps, cfg.rollout.val_problems) == ("file", 11, 500)


def test_config_explain_lists_every_key(home: Path) -> None:
    res = runner.invoke(app, ["config", "--explain"])
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert 'model.name: str = "tiny"' in [line.strip() for line in lines]
    assert any(line.strip().startswith("rollout.batch_size: int (>= 1, <= 4096) = 64") for line in lines)
    for doc in describe():
        assert any(line.strip().startswith(f"{doc.key}: ") for line in lines), doc.key
    bad = runner.invoke(app, ["config", "--explain", "--set", "wieghts.steps=1"])
    assert bad.exit_code == 2 and "did you mean 'weights'" in bad.output


def _one_error_line(res: Any, *fragments: str) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in res.stdout + res.stderr, res.stderr
    for f in fragments:
        assert f in lines[-1], (f, lines[-1])
    return str(lines[-1])


def test_a_typo_in_an_eval_config_file_is_one_line(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text("model:\n  nmae: tiny\n")
    _one_error_line(
        runner.invoke(app, ["eval", "--config", str(bad), "-n", "1"]), "unknown key 'model.nmae'", "'model.name'"
    )


def test_a_typo_in_run_set_is_one_line(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whale_cli import run

    monkeypatch.setattr(run, "start_prefect_server", lambda: None)  # no server for a config that is refused
    _one_error_line(runner.invoke(app, ["run", "--set", "iteratons=3"]), "unknown key 'iteratons'", "'iterations'")


@pytest.mark.parametrize("name", ["train", "run", "compare", "deploy"])
def test_model_adapter_is_refused_where_it_would_be_ignored(
    name: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from whale_cli import run

    monkeypatch.setattr(run, "start_prefect_server", lambda: None)
    args = [name, "--set", "model.adapter=/some/adapter"] + (["--cron", "0 3 * * *"] if name == "deploy" else [])
    _one_error_line(runner.invoke(app, args), "model.adapter is read only by `whale eval`", f"`whale {name}`")


def test_eval_reads_the_config_file_and_flags_override_it(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("suite: {name: sort, seed: 1}\nrollout: {batch_size: 4}\nmodel: {device: cpu}\n")
    res = runner.invoke(app, ["eval", "-c", str(cfg), "-n", "2"])
    assert res.exit_code == 0, res.output
    assert "on sort/val: n=2" in res.output
    res = runner.invoke(app, ["eval", "-c", str(cfg), "--set", "suite.name=sort", "--suite", "arith", "-n", "3"])
    assert res.exit_code == 0 and "on arith/val: n=3" in res.output, res.output


def _problem_ids(traces: Path) -> list[str]:
    return [json.loads(line)["problem_id"] for line in traces.read_text().splitlines()]


def test_eval_seed_still_draws_the_problems_unless_suite_seed_is_set(home: Path, tmp_path: Path) -> None:
    """`--seed` is the key `seed`; in eval the suite's problems follow it (as before) unless `suite.seed` is set."""
    from whale_core.suites import SuiteConfig, load_suite

    def ids(seed: int) -> list[str]:
        return [p.id for p in load_suite(SuiteConfig(name="arith", seed=seed)).problems("val")][:2]

    assert ids(3) != ids(0)
    for args, suite_seed in (
        (["--seed", "3"], 3),
        (["--set", "seed=3"], 3),
        (["--seed", "3", "--set", "suite.seed=0"], 0),
    ):
        out = tmp_path / f"{'-'.join(args)}.jsonl"
        res = runner.invoke(app, ["eval", *args, "-n", "2", "--device", "cpu", "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert _problem_ids(out) == ids(suite_seed), args


def test_search_defaults_to_the_structural_space_and_a_file_or_set_overrides_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: Path
) -> None:
    """`whale search` (one leg on a task, usually a new one) searches the format fixes by default; `whale run` keeps
    the config's default (`classic`), and a config file or `--set` wins over the command's default."""
    import whale_cli.search as search

    seen: list[Any] = []

    def capture(config: Any, sets: Any, *, defaults: Any = None, **flags: Any) -> Any:
        seen.append(common.resolve_config(config, sets, defaults=defaults, **flags))
        raise _Stop("stop")

    monkeypatch.setattr(search, "resolve_config", capture)
    path = tmp_path / "c.yaml"
    path.write_text("search: {mutate_space: classic}\n")
    for args in ([], ["--set", "search.mutate_space=classic"], ["--config", str(path)]):
        res = runner.invoke(app, ["search", *args])
        assert res.exit_code == 2 and "stop" in res.output, res.output
    assert [c.search.mutate_space for c in seen] == ["structural", "classic", "classic"]
    assert common.resolve_config(None, None).search.mutate_space == "classic"  # what `whale run` starts from
