"""Maintainers: build the default tiny model from scratch on this machine and ship it with WHALE.

Run after changing the default `TinyRecipe` (a test fails until the new recipe has a shipped copy):

    .venv/bin/python scripts/ship_tiny_model.py

It trains the default recipe in a temporary home (~5 min on 2 cores), prints the build's 3-digit figures and its
``build_env``, writes the model to ``whale_core/models/shipped/tiny-<hash>/`` with ``SHA256SUMS`` and removes the
shipped copies of other recipes. Why WHALE ships the weights at all: `whale_core/models/shipped.py`. Check the
figures before committing: where the recipe crosses its learning transition depends on the CPU's kernels.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from whale_core.models import shipped
from whale_core.models.tiny import TinyRecipe
from whale_core.models.tiny_build import build_tiny_model


def main() -> None:
    recipe = TinyRecipe()
    with tempfile.TemporaryDirectory(prefix="whale-ship-") as home:
        built = build_tiny_model(Path(home), recipe, from_scratch=True)
        report = json.loads((built / "warmup_report.json").read_text())
        dest = shipped.ship(built, recipe.hash())
    for old in shipped.SHIPPED_ROOT.glob("tiny-*"):
        if old != dest:
            shutil.rmtree(old)
    three = {name: v["accuracy"] for name, v in report["three_digit"].items()}
    print(json.dumps({"shipped": str(dest), "three_digit": three, "build_env": report["build_env"]}, indent=2))


if __name__ == "__main__":
    main()
