"""Typed run configuration: one section per concern, YAML in, CLI overrides on top, validated on load.

Each concern owns its section's schema where it lives (``SuiteConfig`` in ``suites``, ``WeightsConfig`` in
``weights``, ``SearchConfig`` in ``search``, ``BudgetConfig`` in ``budget``, ``ScheduleConfig`` in ``schedule``); this
module composes them into `WhaleConfig` and turns pydantic's validation errors into `ConfigError` messages that
name the key (``weights.learning_rate``), list the valid keys or values, and suggest the closest spelling.

Overrides are ``dotted.key=value`` strings; the value is parsed as YAML (``weights.steps=200``,
``schedule.kind=adaptive``, ``suite.sizes.val=100``, ``search.proposer=openai/gpt-4o-mini``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from whale_core.errors import WhaleError
from whale_core.legs.budget import BudgetConfig
from whale_core.legs.harness_leg import SearchConfig
from whale_core.legs.schedule import ScheduleConfig
from whale_core.legs.weights_config import WeightsConfig
from whale_core.suites import SuiteConfig

Mode = Literal["whale-adaptive", "whale-fixed", "weights-only", "harness-only", "prompt-weights"]
MODES: tuple[str, ...] = ("whale-adaptive", "whale-fixed", "weights-only", "harness-only", "prompt-weights")


class ConfigError(WhaleError, ValueError):
    """A configuration problem, with a message that names the key and says what is valid."""


class ModelConfig(BaseModel):
    """The policy: ``tiny`` (the built-in model; WHALE ships its weights), a named model installed with ``whale models
    install NAME`` (``whale models list``), or a local HF model directory."""

    model_config = ConfigDict(extra="forbid")

    name: str = "tiny"
    adapter: str | None = None
    device: str = "auto"


class RolloutConfig(BaseModel):
    """How evaluations run: generation batch size and the evaluation subset sizes."""

    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(64, ge=1, le=4096)
    val_problems: int = Field(200, ge=1, description="val problems per iteration evaluation")
    test_problems: int = Field(500, ge=1, description="test problems in the final evaluation")


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

    model_config = ConfigDict(extra="forbid")

    task_runner: Literal["threads", "dask"] = "threads"
    max_workers: int = Field(1, ge=1, le=256)
    dask_address: str | None = None

    @property
    def inline(self) -> bool:
        """Scoring tasks run in the flow's thread (no fan-out): the thread runner with one worker."""
        return self.task_runner == "threads" and self.max_workers == 1


class TrackingConfig(BaseModel):
    """Where state goes. ``None`` means the embedded default under ``$WHALE_HOME`` (SQLite, MLflow on SQLite)."""

    model_config = ConfigDict(extra="forbid")

    archive_url: str | None = None  # else $WHALE_DB_URL, else sqlite:///$WHALE_HOME/whale.db
    mlflow_uri: str | None = None  # else $MLFLOW_TRACKING_URI, else sqlite:///$WHALE_HOME/mlflow.db
    experiment: str = "whale"


class WhaleConfig(BaseModel):
    """A whole WHALE run. Every section has defaults that run on the embedded default (tiny model, ``arith``)."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "whale-fixed"
    seed: int = 0
    iterations: int = Field(4, ge=1, le=1000)
    harness: str | None = None  # harness file; default: the suite's seed harness
    model: ModelConfig = Field(default_factory=ModelConfig)
    suite: SuiteConfig = Field(default_factory=SuiteConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    weights: WeightsConfig = Field(default_factory=WeightsConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)


def _model_at(loc: Iterable[Any]) -> type[BaseModel] | None:
    """The pydantic model class that owns the key at ``loc`` (for listing valid keys)."""
    model: type[BaseModel] | None = WhaleConfig
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return model
        ann = model.model_fields[part].annotation
        candidates = [ann, *getattr(ann, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
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


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> WhaleConfig:
    """Load a config: the file's YAML (if any), then each ``key=value`` override, then validation."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"config file {p} cannot be read: {exc.strerror or exc}") from None
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
    return _validate(data)


def config_to_yaml(cfg: WhaleConfig) -> str:
    """The full config (defaults filled in) as YAML — what ``whale config`` prints and runs store."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (for MLflow params)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
