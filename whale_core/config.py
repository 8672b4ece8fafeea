"""Typed run configuration: one section per concern, YAML in, CLI overrides on top, validated on load.

Each concern owns its section's schema where it lives (``SuiteConfig`` in ``suites``, ``WeightsConfig`` in
``weights``, ``SearchConfig`` in ``search``, ``BudgetConfig`` in ``budget``, ``ScheduleConfig`` in ``schedule``); this
module composes them into `WhaleConfig` and turns pydantic's validation errors into `ConfigError` messages that
name the key (``weights.learning_rate``), list the valid keys or values, and suggest the closest spelling.

Overrides are ``dotted.key=value`` strings; the value is parsed as YAML (``weights.steps=200``,
``schedule.start=weights``, ``suite.sizes.val=100``, ``search.proposer=openai/gpt-4o-mini``). `load_config` applies,
lowest to highest: the models' defaults, a command's own defaults, the YAML file, the ``--set`` overrides, the
command's alias flags (``--model X`` is ``model.name=X``; the table is ``whale_cli.common.ALIASES``).

Every field carries a ``description``; `describe` walks the models (sections of other modules included) for
``whale config --explain``. `flatten` (from `whale_core.dotted`, re-exported here) turns a nested config into
dotted keys.
"""

from __future__ import annotations

import difflib
import functools
import json
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from whale_core.dotted import flatten as flatten  # re-exported: the rule for a config's dotted keys
from whale_core.errors import WhaleError
from whale_core.legs.budget import BudgetConfig
from whale_core.legs.harness_leg import SearchConfig
from whale_core.legs.schedule import ScheduleConfig
from whale_core.legs.weights_config import WeightsConfig, upgrade_lora_keys
from whale_core.records.mlflow_params import redact_value
from whale_core.suites import SuiteConfig
from whale_core.user_files import read_user_file

Mode = Literal["whale-adaptive", "whale-fixed", "weights-only", "harness-only", "prompt-weights"]
MODES: tuple[str, ...] = get_args(Mode)


MAX_CONFIG_BYTES = 1 << 20  # a config file is a page of YAML


class ConfigError(WhaleError, ValueError):
    """A configuration problem, with a message that names the key and says what is valid."""


class ModelConfig(BaseModel):
    """The policy: ``tiny`` (the built-in model; WHALE ships its weights), a named model installed with ``whale models
    install NAME`` (``whale models list``), or a local HF model directory."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(
        "tiny",
        description="'tiny' (built in), an installed model's name (`whale models list`) or a local Hugging Face "
        "model directory (with config.json); never downloaded",
    )
    adapter: str | None = Field(
        None,
        description="LoRA adapter directory applied on top of `name`; read by `whale eval` only (a run or `whale "
        "train` starts from the base model and refuses it); null = none",
    )
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N | mps; a device that is not present is refused")


class RolloutConfig(BaseModel):
    """How evaluations run: generation batch size and the evaluation subset sizes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    batch_size: int = Field(64, ge=1, le=4096, description="prompts per generate() call in every evaluation")
    val_problems: int = Field(
        200,
        ge=1,
        le=10_000_000,
        description="val problems (the split's first N) scored after each leg; `whale train -n`",
    )
    test_problems: int = Field(
        500, ge=1, le=10_000_000, description="test problems (the split's first N) in the final evaluation"
    )


class OrchestrationConfig(BaseModel):
    """How candidate scoring fans out: Prefect's thread pool (default), or a Dask cluster through ``prefect-dask``
    (``pip install -e '.[dask]'``): a local cluster of ``max_workers`` processes, or an existing one at
    ``dask_address`` (``tcp://host:8786``) whose workers can reach the same model paths and Prefect API.

    ``max_workers`` is how many scoring tasks run at once. The default, 1, runs each candidate's scoring task in the
    flow's own thread, one after another (still one cached, retried Prefect task run per candidate block): on a CPU
    torch already uses every core inside one rollout, and a rollout in a second thread was measured 1.6–1.9× slower
    than in the main thread (2-core CPU: two OpenMP thread teams on two cores), two at once finishing no sooner than
    one after the other. Raise it for an accelerator, where rollouts in threads can overlap (not measured here), or
    for a Dask cluster's worker processes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task_runner: Literal["threads", "dask"] = Field(
        "threads", description="threads: Prefect's thread pool | dask: prefect-dask (the `dask` extra)"
    )
    max_workers: int = Field(
        1, ge=1, le=256, description="scoring tasks run at once (1: in the flow's thread, one after another)"
    )
    dask_address: str | None = Field(
        None, description="an existing Dask scheduler, e.g. tcp://host:8786; null = a local cluster (dask only)"
    )

    @property
    def inline(self) -> bool:
        """Scoring tasks run in the flow's thread (no fan-out): the thread runner with one worker."""
        return self.task_runner == "threads" and self.max_workers == 1


class TrackingConfig(BaseModel):
    """Where state goes. ``None`` means the embedded default under ``$WHALE_HOME`` (SQLite, MLflow on SQLite)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    archive_url: str | None = Field(
        None, description="archive database URL (SQLAlchemy); null = $WHALE_DB_URL, else sqlite:///$WHALE_HOME/whale.db"
    )
    mlflow_uri: str | None = Field(
        None, description="MLflow tracking URI; null = $MLFLOW_TRACKING_URI, else sqlite:///$WHALE_HOME/mlflow.db"
    )
    experiment: str = Field("whale", description="MLflow experiment the run's lineage is logged under")


class WhaleConfig(BaseModel):
    """A whole WHALE run. Every section has defaults that run on the embedded default (tiny model, ``arith``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mode: Mode = Field(
        "whale-fixed",
        description="whale-adaptive: switch legs on a plateau | whale-fixed: fixed-length phases | weights-only | "
        "harness-only | prompt-weights: alternate, the harness leg edits only the instruction",
    )
    seed: int = Field(
        0, description="run seed: sampling, few-shot demos, the proposer, training (the problems: suite.seed)"
    )
    iterations: int | None = Field(
        4,
        ge=1,
        le=1000,
        description="legs to run, one per iteration (the budget may end sooner); null = until the budget is spent or "
        "schedule.stop_patience legs bring no progress (equal spend across modes)",
    )
    harness: str | None = Field(None, description="starting harness YAML file; null = the suite's seed harness")
    model: ModelConfig = Field(default_factory=ModelConfig, description="the policy and where it runs")
    suite: SuiteConfig = Field(default_factory=SuiteConfig, description="the task suite and its splits")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="evaluation batch and subset sizes")
    weights: WeightsConfig = Field(default_factory=WeightsConfig, description="the weights leg (GRPO + LoRA)")
    search: SearchConfig = Field(default_factory=SearchConfig, description="the harness leg (propose, score, accept)")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="which leg runs next")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="the rollout budget, in completions")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="where the run's records go")
    orchestration: OrchestrationConfig = Field(
        default_factory=OrchestrationConfig, description="how candidate scoring fans out"
    )

    @model_validator(mode="after")
    def _no_credentials(self) -> WhaleConfig:
        """A password in a URL (``http://user:pass@host``) would be stored with the run — its archive row, Prefect's
        flow-run parameters, MLflow — so it is refused, naming the key (never the value)."""
        for key, value in flatten(self.model_dump(mode="json")).items():
            if isinstance(value, str) and redact_value(value) != value:
                raise ValueError(
                    f"'{key}' holds a password (user:password@ in a URL), which would be stored with the run: give "
                    "credentials through the environment instead — search.api_key_env names the variable holding a "
                    "proposer's key; WHALE_DB_URL and MLFLOW_TRACKING_URI hold the stores' URLs"
                )
        return self

    @model_validator(mode="after")
    def _stop_rule(self) -> WhaleConfig:
        if self.iterations is None and self.schedule.stop_patience is None:
            raise ValueError(
                "iterations: null (run until the budget is spent) needs schedule.stop_patience, e.g. 3: without it a "
                "search that stops finding anything would run on its leftover budget for up to 1000 legs"
            )
        return self

    @property
    def max_legs(self) -> int:
        """The iteration cap in force: ``iterations``, or 1000 (the schema's ceiling) when it is null."""
        return self.iterations if self.iterations is not None else 1000


def _submodel(ann: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``X`` or ``X | None``), if any."""
    candidates = [ann, *get_args(ann)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _model_at(loc: Iterable[Any]) -> type[BaseModel] | None:
    """The pydantic model class that owns the key at ``loc`` (for listing valid keys)."""
    model: type[BaseModel] | None = WhaleConfig
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return model
        model = _submodel(model.model_fields[part].annotation)
    return model


def _format_error(err: Mapping[str, Any]) -> str:
    loc = [p for p in err["loc"]]
    key = ".".join(str(p) for p in loc)
    if err["type"] == "extra_forbidden":
        owner = _model_at(loc[:-1])
        valid = sorted(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f" (did you mean '{'.'.join(str(p) for p in loc[:-1] + close)}'?)" if close else ""
        return f"unknown key '{key}'{hint}; valid keys here: {', '.join(valid)}"
    if not loc:  # a rule across keys (a model validator): its message names the keys
        return str(err["msg"]).removeprefix("Value error, ")
    return f"'{key}': {err['msg']} (got {err.get('input')!r})"


def _validate(data: Mapping[str, Any]) -> WhaleConfig:
    try:
        return WhaleConfig.model_validate(dict(data))
    except ValidationError as exc:
        lines = [_format_error(e) for e in exc.errors()]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """``"weights.steps=200"`` → ``("weights.steps", 200)``; the value is read as YAML."""
    try:
        item.encode("utf-8")
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as lone surrogates (surrogateescape)
        raise ConfigError(f"override {item!r} is not valid UTF-8 text") from None
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. weights.steps=200)")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


@dataclass(frozen=True)
class Follows:
    """A command default (`load_config`'s ``defaults``) that copies another key's resolved value: in ``whale eval``
    and ``whale train`` the suite's problems follow the run seed (``suite.seed`` follows ``seed``) unless set."""

    key: str


def _fill_default(data: dict[str, Any], key: str, value: Any) -> bool:
    """Set ``key`` to ``value`` where nothing set it (a parent that is not a mapping is left to validation)."""
    node: Any = data
    for part in key.split(".")[:-1]:
        node = node.get(part, {})
        if not isinstance(node, Mapping):
            return False
    if isinstance(node, Mapping) and key.split(".")[-1] in node:
        return False
    _set_dotted(data, key, value)
    return True


def upgrade_stored(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run config as the archive stored it, in today's shape: keys that later moved get their new place (the LoRA
    settings' own ``weights.lora`` section). For stored records only — resuming a run or a comparison started before a
    key moved; a user's own file or ``--set`` with an old key is refused with the new key's name."""
    out = dict(config)
    if isinstance(out.get("weights"), Mapping):
        out["weights"] = upgrade_lora_keys(out["weights"])
    return out


def load_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    *,
    flags: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> WhaleConfig:
    """Load a config, then validate it. Precedence, highest first: ``flags`` (dotted key -> value, already typed: a
    command's alias flags), each ``key=value`` of ``overrides`` (``--set``, later ones win), the YAML file at
    ``path``, ``defaults`` (dotted key -> value: a command's own default for a key, e.g. ``whale train``'s 500 val
    problems, or a `Follows`), the models' defaults."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        raw = read_user_file(p, "config file", MAX_CONFIG_BYTES, ConfigError)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = f"byte 0x{raw[exc.start : exc.start + 1].hex()} at offset {exc.start}"
            raise ConfigError(f"config file {p} is not valid UTF-8 ({bad})") from None
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {' '.join(str(exc).split())}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        data = loaded
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(data, key, value)
    for key, value in (flags or {}).items():
        _set_dotted(data, key, value)
    follows = {k: v for k, v in (defaults or {}).items() if isinstance(v, Follows)}
    for key, value in (defaults or {}).items():
        if key not in follows:
            _fill_default(data, key, value)
    cfg = _validate(data)
    if _named_model_defaults(data, cfg):
        cfg = _validate(data)
    if follows:
        for key, ref in follows.items():
            _fill_default(data, key, functools.reduce(getattr, ref.key.split("."), cfg))
        cfg = _validate(data)
    return cfg


def _named_model_defaults(data: dict[str, Any], cfg: WhaleConfig) -> bool:
    """Fill the named model's own weights-leg defaults (``named.yaml``'s ``weights:``) where nothing set them; a
    ``micro_batch_size`` becomes the largest divisor of the step's completions not above it. Whether any was set."""
    from whale_core.models.named import weights_defaults

    filled = False
    for key, value in weights_defaults(cfg.model.name).items():
        if key == "micro_batch_size" and isinstance(value, int) and not isinstance(value, bool):
            step = cfg.weights.per_device_train_batch_size
            value = max(d for d in range(1, min(value, step) + 1) if step % d == 0)
        filled |= _fill_default(data, f"weights.{key}", value)
    return filled


def config_to_yaml(cfg: WhaleConfig) -> str:
    """The full config (defaults filled in) as YAML — what ``whale config`` prints and runs store."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


# ------------------------------------------------------------------------------------------- whale config --explain
@dataclass(frozen=True)
class FieldDoc:
    """One config key for ``whale config --explain``: dotted key, type (with bounds), default, description.
    ``section`` marks a field that holds a nested model (its keys follow it)."""

    key: str
    type: str
    default: str
    description: str
    section: bool = False


def _type_name(ann: Any) -> str:
    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if ann is type(None):
        return "null"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    if isinstance(ann, type):
        return ann.__name__
    return str(ann).replace("typing.", "")


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _bounds(info: Any) -> str:
    parts = [f"{sym} {getattr(m, attr)}" for m in info.metadata for attr, sym in _BOUNDS if hasattr(m, attr)]
    return f" ({', '.join(parts)})" if parts else ""


def describe(model: type[BaseModel] = WhaleConfig, prefix: str = "") -> list[FieldDoc]:
    """Every key of ``model``, depth first in declaration order: a section's own entry, then its keys. A section
    without a ``description`` shows its class docstring's first line; a leaf without one shows ``""``."""
    docs: list[FieldDoc] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = _submodel(info.annotation)
        default = info.get_default(call_default_factory=True)
        if sub is not None:
            doc = info.description or (sub.__doc__ or "").strip().split("\n")[0]
            shown = "null" if default is None else "(section)"
            docs.append(FieldDoc(key, _type_name(info.annotation), shown, doc, section=True))
            docs.extend(describe(sub, key + "."))
            continue
        shown = json.dumps(default, default=str)
        docs.append(FieldDoc(key, _type_name(info.annotation) + _bounds(info), shown, info.description or ""))
    return docs


def undescribed(model: type[BaseModel] = WhaleConfig) -> list[str]:
    """Dotted keys of the leaf fields (not sections) that have no description."""
    return [d.key for d in describe(model) if not d.section and not d.description.strip()]
