"""The default tiny model, shipped with WHALE as weights: where the copy lives, how it is verified and installed.

Why the default model ships as weights instead of being trained on each machine: the warm-up recipe
(`whale_core.models.tiny`) sits at a sharp learning transition, and on the CPU *where* it crosses depends on the
floating point of the kernels torch dispatches to: the same code, recipe and seed, one thread, deterministic
algorithms, learns the reversed format on one machine's kernels and not on another's, and more steps do not give the
recipe a margin (figures: docs/tiny-model.md). Evaluating one set of weights, on the other hand, is stable across
kernels. So the model whose properties the docs, the tests and the embedded default rely on is built once on the
reference machine and shipped, and every machine runs those weights.

The copy lives in ``shipped/tiny-<recipe hash>/`` next to this module: the files ``save_pretrained`` wrote, the
recipe, the build's ``warmup_report.json`` (with its ``build_env``: torch version, kernels, CPU) and ``SHA256SUMS``.
`install` checks every file against ``SHA256SUMS`` before copying it (a damaged or Git-LFS-pointer file is a clear
`ShippedModelError`, never a silently different model). A recipe with no shipped copy (any non-default recipe, or
`whale_core.models.tiny_build.build_tiny_model` with ``from_scratch=True``) is trained on the machine as before. `ship`
(used by ``scripts/ship_tiny_model.py``) writes a freshly built model into this directory when the default recipe
changes; a test fails if the default recipe has no shipped copy.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from whale_core.errors import WhaleError

__all__ = ["SHIPPED_ROOT", "ShippedModelError", "install", "ship", "shipped_dir", "verify"]

SHIPPED_ROOT = Path(__file__).resolve().parent / "shipped"
CHECKSUMS = "SHA256SUMS"
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "recipe.json", "warmup_report.json")


class ShippedModelError(WhaleError, RuntimeError):
    """The shipped model copy is incomplete or damaged (names the file and what was expected)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shipped_dir(recipe_hash: str, root: Path | None = None) -> Path | None:
    """The shipped copy of the tiny model for ``recipe_hash``, or None where WHALE ships none."""
    path = (root or SHIPPED_ROOT) / f"tiny-{recipe_hash}"
    return path if path.is_dir() else None


def verify(src: Path) -> list[str]:
    """Check every file of the shipped copy ``src`` against its ``SHA256SUMS``; return the file names.

    Raises `ShippedModelError` for a missing checksum file, a missing or extra required file, or a checksum that
    does not match (e.g. a Git LFS pointer instead of the weights).
    """
    sums_path = src / CHECKSUMS
    if not sums_path.is_file():
        raise ShippedModelError(f"the shipped tiny model at {src} has no {CHECKSUMS}: reinstall WHALE")
    expected: dict[str, str] = {}
    for lineno, line in enumerate(sums_path.read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64 or "/" in parts[1]:
            raise ShippedModelError(f"{sums_path}:{lineno}: expected '<sha256>  <file name>', got {line!r}")
        expected[parts[1]] = parts[0]
    missing = [name for name in REQUIRED if name not in expected]
    if missing:
        raise ShippedModelError(f"{sums_path} does not list {', '.join(missing)}: the shipped copy is incomplete")
    for name, sha in expected.items():
        path = src / name
        if not path.is_file():
            raise ShippedModelError(f"the shipped tiny model file {path} is missing: reinstall WHALE")
        actual = _sha256(path)
        if actual != sha:
            raise ShippedModelError(
                f"the shipped tiny model file {path} is damaged: sha256 {actual[:16]}… where {CHECKSUMS} says "
                f"{sha[:16]}… ({path.stat().st_size} bytes; a Git LFS pointer is ~130). Reinstall WHALE, or build the "
                "model on this machine with build_tiny_model(from_scratch=True)"
            )
    return sorted(expected)


def install(src: Path, dest: Path) -> None:
    """Verify the shipped copy ``src`` and copy its files (checksums included) into the existing dir ``dest``."""
    for name in [*verify(src), CHECKSUMS]:
        shutil.copyfile(src / name, dest / name)


def ship(model_dir: Path, recipe_hash: str, root: Path | None = None) -> Path:
    """Copy a built tiny model into the shipped directory with a fresh ``SHA256SUMS``; return the shipped dir.

    Maintainers only (``scripts/ship_tiny_model.py``): run after changing the default recipe.
    """
    names = sorted(p.name for p in model_dir.iterdir() if p.is_file() and p.name != CHECKSUMS)
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise ShippedModelError(f"{model_dir} is not a built tiny model: no {', '.join(missing)}")
    dest = (root or SHIPPED_ROOT) / f"tiny-{recipe_hash}"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in names:
        shutil.copyfile(model_dir / name, dest / name)
    (dest / CHECKSUMS).write_text("".join(f"{_sha256(dest / name)}  {name}\n" for name in names))
    return dest
