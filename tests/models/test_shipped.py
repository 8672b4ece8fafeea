"""The shipped default tiny model: present for the default recipe, verified, installed without training, and it
scores on this machine what its report says it scored on the reference machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from whale_core.models import shipped, tiny, tiny_build, warmup
from whale_core.models.shipped import ShippedModelError
from whale_core.models.tiny import TinyRecipe
from whale_core.models.tiny_build import build_tiny_model

MICRO = TinyRecipe(
    steps=3, batch_size=4, hidden_size=32, intermediate_size=64, layers=1, heads=2, eval_n=4, eval_digits_n=2
)


def _no_training(*a: Any, **k: Any) -> None:
    raise AssertionError("installing the shipped model must not train")


def test_the_default_recipe_has_a_verified_shipped_copy() -> None:
    src = shipped.shipped_dir(TinyRecipe().hash())
    assert src is not None, "the default recipe changed: run scripts/ship_tiny_model.py and commit its output"
    names = shipped.verify(src)
    assert {"model.safetensors", "config.json", "tokenizer.json", "recipe.json", "warmup_report.json"} <= set(names)
    assert TinyRecipe(**json.loads((src / "recipe.json").read_text())) == TinyRecipe()
    report = json.loads((src / "warmup_report.json").read_text())
    assert report["recipe_hash"] == TinyRecipe().hash()
    assert set(report["build_env"]) == {"torch", "cpu_capability", "cpu", "machine"}
    assert [p.name for p in shipped.SHIPPED_ROOT.iterdir()] == [src.name]  # no stale copies of older recipes


def test_install_copies_the_shipped_files_without_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny_build, "_train", _no_training)
    out = build_tiny_model(tmp_path)
    src = shipped.shipped_dir(TinyRecipe().hash())
    assert src is not None and out == tiny.tiny_model_dir(tmp_path)
    for name in shipped.verify(src):
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == [out.name]


def test_shipped_model_scores_here_what_its_report_says(tiny_model_dir: Path) -> None:
    """Evaluating fixed weights is stable across CPUs (unlike training them): re-evaluate on this machine."""
    from whale_core.harness import Harness
    from whale_core.models.policy import load_policy
    from whale_core.rollout import rollout
    from whale_core.suites import load_suite

    report = json.loads((tiny_model_dir / "warmup_report.json").read_text())
    recipe = TinyRecipe()
    formats = {f.name: Harness.from_text(f.harness) for f in warmup.warmup_formats(recipe)}
    policy = load_policy(tiny_model_dir, device="cpu")
    problems = tiny_build._eval_problems(recipe, 3)
    here = {}
    for name in ("plain-p0-k0", "rev-p0-k0"):
        here[name] = rollout(policy, formats[name], load_suite("arith"), problems, batch_size=256, seed=0).score
        assert here[name] == pytest.approx(report["three_digit"][name]["accuracy"], abs=0.01), name
    assert here["rev-p0-k0"] - here["plain-p0-k0"] > 0.1  # the harness matters, on this machine's kernels


def _copy_root(tmp_path: Path) -> Path:
    src = shipped.shipped_dir(TinyRecipe().hash())
    assert src is not None
    root = tmp_path / "shipped"
    shutil.copytree(src, root / src.name)
    return root


def test_a_damaged_shipped_file_is_a_clear_error_and_leaves_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy_root(tmp_path)
    weights = root / f"tiny-{TinyRecipe().hash()}" / "model.safetensors"
    weights.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1080416\n")  # an LFS pointer
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", root)
    monkeypatch.setattr(tiny_build, "_train", _no_training)
    home = tmp_path / "home"
    with pytest.raises(ShippedModelError, match=r"model\.safetensors is damaged.*Git LFS pointer.*from_scratch=True"):
        build_tiny_model(home)
    assert [p.name for p in (home / "models").iterdir() if not p.name.endswith(".lock")] == []


def test_load_policy_tiny_trains_where_whale_ships_no_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime path (`load_policy("tiny")`): the shipped copy installed; with none shipped (an install without
    the package data), the from-scratch build (`tiny_build`, imported lazily) as before the runtime/build split."""
    from whale_core.models.policy import _resolve_model_dir

    built: list[Path] = []

    def fake_build(out: Path, recipe: TinyRecipe, progress: Any) -> None:
        built.append(out)
        (out / "warmup_report.json").write_text("{}")

    monkeypatch.setattr(tiny_build, "_build_into", fake_build)
    installed = _resolve_model_dir("tiny", tmp_path / "a")
    assert built == [] and installed == tiny.tiny_model_dir(tmp_path / "a") and (installed / "SHA256SUMS").is_file()
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", tmp_path / "nothing-shipped")
    assert tiny.install_tiny_model(tmp_path / "b") is None  # no copy, no builder: nothing written
    trained = _resolve_model_dir("tiny", tmp_path / "b")
    assert len(built) == 1 and trained == tiny.tiny_model_dir(tmp_path / "b")
    assert (trained / "warmup_report.json").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "SHA256SUMS").unlink(), "has no SHA256SUMS"),
        (lambda d: (d / "SHA256SUMS").write_text("not a checksum line\n"), r"SHA256SUMS:1: expected"),
        (lambda d: (d / "tokenizer.json").unlink(), r"tokenizer\.json is missing"),
        (
            lambda d: (d / "SHA256SUMS").write_text(
                "".join(ln + "\n" for ln in (d / "SHA256SUMS").read_text().splitlines() if "recipe.json" not in ln)
            ),
            "does not list recipe.json",
        ),
    ],
    ids=["no-checksums", "garbled-checksums", "missing-file", "unlisted-file"],
)
def test_verify_names_what_is_wrong(tmp_path: Path, damage: Any, message: str) -> None:
    d = _copy_root(tmp_path) / f"tiny-{TinyRecipe().hash()}"
    damage(d)
    with pytest.raises(ShippedModelError, match=message):
        shipped.verify(d)


@pytest.mark.slow
def test_ship_then_install_round_trip_and_from_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    built = build_tiny_model(tmp_path / "build", MICRO)  # no shipped copy for this recipe: trained here
    report = json.loads((built / "warmup_report.json").read_text())
    assert report["build_env"]["torch"] and report["build_env"]["cpu_capability"]
    root = tmp_path / "shipped"
    dest = shipped.ship(built, MICRO.hash(), root)
    assert shipped.verify(dest) == sorted(p.name for p in built.iterdir() if p.is_file())
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", root)

    trained: list[int] = []
    real_train = tiny_build._train
    monkeypatch.setattr(tiny_build, "_train", lambda *a, **k: trained.append(1) or real_train(*a, **k))
    installed = build_tiny_model(tmp_path / "install", MICRO)
    assert trained == [] and (installed / "SHA256SUMS").is_file()
    a, b = load_file(str(built / "model.safetensors")), load_file(str(installed / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    rebuilt = build_tiny_model(tmp_path / "scratch", MICRO, from_scratch=True)  # ignores the shipped copy
    assert trained == [1] and not (rebuilt / "SHA256SUMS").exists()
