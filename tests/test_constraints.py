"""The pinned stack must not admit the compromised litellm releases (1.82.7, 1.82.8, 1.107.0).

Both install paths are checked: ``pip install -c constraints.txt -e .`` (the README's) and a plain
``pip install -e .`` (pyproject.toml alone, every extra included), plus the version actually installed here.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
COMPROMISED = {"litellm": ("1.82.7", "1.82.8", "1.107.0")}


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    return [Requirement(line) for line in lines]


def _constraints() -> list[Requirement]:
    out = []
    for raw in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out.append(Requirement(line))
    return out


def _admitted(reqs: list[Requirement], name: str) -> list[str]:
    """The compromised versions of ``name`` that ``reqs`` would let pip install (all if ``name`` is unconstrained)."""
    specs = [r.specifier for r in reqs if canonicalize_name(r.name) == name]
    combined = SpecifierSet(",".join(str(s) for s in specs if str(s)))
    if not specs or not str(combined):
        return list(COMPROMISED[name])
    return [v for v in COMPROMISED[name] if combined.contains(v, prereleases=True)]


@pytest.mark.parametrize("name", sorted(COMPROMISED))
def test_constraints_and_pyproject_exclude_compromised_releases(name: str) -> None:
    assert _admitted(_constraints(), name) == [], f"constraints.txt admits compromised {name}"
    assert _admitted(_pyproject_requirements(), name) == [], f"pyproject.toml admits compromised {name}"


def test_the_check_catches_a_compromised_pin() -> None:
    """The check itself can fail: a loose or compromised pin is reported."""
    assert _admitted([Requirement("litellm==1.82.7")], "litellm") == ["1.82.7"]
    assert _admitted([Requirement("litellm>=1.80")], "litellm") == list(COMPROMISED["litellm"])
    assert _admitted([Requirement("litellm>=1.80,!=1.82.7,!=1.82.8,!=1.107.0")], "litellm") == []
    assert _admitted([Requirement("requests")], "litellm") == list(COMPROMISED["litellm"])


@pytest.mark.parametrize("name", sorted(COMPROMISED))
def test_installed_version_is_not_compromised(name: str) -> None:
    assert importlib.metadata.version(name) not in COMPROMISED[name]
