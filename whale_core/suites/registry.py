"""Suite configuration and loading: built-in names, the `jsonl` loader, and user suites by dotted path.

``load_suite(SuiteConfig(...))`` (or ``load_suite("arith")``) returns an object satisfying the `Suite` protocol.

A user's own suite class is named by a dotted path, ``pkg.module:Class`` or ``pkg.module.Class``. Its constructor
contract is::

    Class(seed: int, sizes: dict[str, int] | None, **options) -> Suite

- ``seed`` is ``SuiteConfig.seed``; the suite must be deterministic given (seed, sizes, options).
- ``sizes`` is ``{"train": n, "val": n, "test": n}`` (``SuiteConfig.sizes``, or the generated-suite defaults
  `DEFAULT_SIZES` when not set).
- ``options`` are ``SuiteConfig.options`` passed as keyword arguments; the class validates them itself
  (`parse_options` gives errors naming the key). ``path=...`` is passed too when ``SuiteConfig.path`` is set.
The returned object is checked with ``isinstance(obj, Suite)`` (attributes ``name``, ``description``,
``seed_harness``, methods ``problems``, ``score``); the checker cannot verify signatures or disjointness.

Built-ins are referenced by dotted path too (imported lazily), so suite modules can import the helpers here
(`SuiteError`, `parse_options`) without an import cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from whale_core.errors import WhaleError
from whale_core.suites.base import Suite

BUILTIN_SUITES: dict[str, str] = {
    "arith": "whale_core.suites.arith:ArithSuite",
    "sort": "whale_core.suites.sort:SortSuite",
    "jsonl": "whale_core.suites.jsonl:JsonlSuite",
}


class SuiteError(WhaleError, ValueError):
    """A suite could not be configured or loaded; the message names the offending key, name, file or line."""


class SplitSizes(BaseModel):
    """How many problems each split holds (for `jsonl`: an upper bound per split)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    train: int = Field(default=3000, ge=1, description="train problems (GRPO prompts, few-shot demos)")
    val: int = Field(default=300, ge=1, description="val problems (leg scores, candidate selection)")
    test: int = Field(default=500, ge=1, description="test problems (final evaluation only)")


DEFAULT_SIZES: dict[str, int] = SplitSizes().model_dump()


class SuiteConfig(BaseModel):
    """Which suite to load and how.

    ``name``: a built-in (`BUILTIN_SUITES`: ``arith``, ``sort``, ``jsonl``) or a dotted path to a suite class.
    ``sizes``: problems per split; ``None`` means the suite's default (3000/300/500 for generated suites, the whole
    file for ``jsonl``). ``path``: the data file (``jsonl`` only). ``options``: suite-specific, validated by the suite.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("arith", description="arith | sort | jsonl (built in) or a suite class: pkg.module:Class")
    seed: int = Field(0, description="seed of the suite's problems (generated suites), apart from the run's seed")
    sizes: SplitSizes | None = Field(
        None, description="problems per split; null = the suite's default (3000/300/500; jsonl: the whole file)"
    )
    path: str | None = Field(None, description="the data file (jsonl suite only): a JSONL file of problems")
    options: dict[str, Any] = Field(
        default_factory=dict, description="suite-specific options, validated by the suite (e.g. arith: max_digits)"
    )


M = TypeVar("M", bound=BaseModel)


def parse_options(model: type[M], options: Mapping[str, Any], suite: str) -> M:
    """Validate a suite's ``options`` against its pydantic model (which should forbid extra keys).

    Raises `SuiteError` naming the suite, the offending key and the valid keys.
    """
    valid = ", ".join(sorted(model.model_fields))
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            if not key:  # a whole-model check; its message names the keys
                problems.append(err["msg"].removeprefix("Value error, "))
            elif err["type"] == "extra_forbidden":
                problems.append(f"unknown option {key!r}")
            else:
                problems.append(f"option {key!r}: {err['msg']}")
        raise SuiteError(f"suite {suite!r}: {'; '.join(problems)} (valid options: {valid})") from None


def _import_class(path: str) -> Any:
    """Import ``pkg.module:Class`` or ``pkg.module.Class``."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise SuiteError(f"suite {path!r}: expected 'pkg.module:Class' or 'pkg.module.Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SuiteError(f"suite {path!r}: cannot import module {module_name!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise SuiteError(f"suite {path!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise SuiteError(f"suite {path!r}: {attr!r} is not a class or callable")
    return obj


def load_suite(cfg: SuiteConfig | str) -> Suite:
    """Build the suite a config names (a bare string is taken as ``SuiteConfig(name=...)``)."""
    if isinstance(cfg, str):
        cfg = SuiteConfig(name=cfg)
    sizes = cfg.sizes.model_dump() if cfg.sizes is not None else None
    if cfg.name in BUILTIN_SUITES:
        cls = _import_class(BUILTIN_SUITES[cfg.name])
        if cfg.name == "jsonl":
            if cfg.path is None:
                raise SuiteError("suite 'jsonl': 'path' is required (the JSONL file to read)")
            return cls(path=cfg.path, seed=cfg.seed, sizes=sizes, **cfg.options)  # type: ignore[no-any-return]
        if cfg.path is not None:
            raise SuiteError(f"suite {cfg.name!r}: 'path' is only used by the 'jsonl' suite")
        return cls(seed=cfg.seed, sizes=sizes or DEFAULT_SIZES, **cfg.options)  # type: ignore[no-any-return]
    if ":" not in cfg.name and "." not in cfg.name:
        raise SuiteError(
            f"unknown suite {cfg.name!r}: use a built-in ({', '.join(BUILTIN_SUITES)}), "
            "'jsonl' with a path, or a dotted path to a suite class ('pkg.module:Class' or 'pkg.module.Class')"
        )
    cls = _import_class(cfg.name)
    kwargs: dict[str, Any] = {"seed": cfg.seed, "sizes": sizes or DEFAULT_SIZES, **cfg.options}
    if cfg.path is not None:
        kwargs["path"] = cfg.path
    try:
        suite = cls(**kwargs)
    except SuiteError:
        raise
    except TypeError as exc:
        raise SuiteError(
            f"suite {cfg.name!r}: constructor must accept (seed=..., sizes=..., **options): {exc}"
        ) from exc
    if not isinstance(suite, Suite):
        required = ("name", "description", "seed_harness", "problems", "score")
        missing = [m for m in required if not hasattr(suite, m)]
        raise SuiteError(
            f"suite {cfg.name!r}: {type(suite).__name__} does not satisfy the Suite protocol "
            f"(missing: {', '.join(missing)})"
        )
    return suite
