"""The archive's records: frozen dataclasses returned by every `Archive` method (never live ORM objects)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError

from whale_core.records.portable import from_home


@dataclasses.dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    mode: str
    config_json: str
    status: str
    created: datetime
    updated: datetime
    mlflow_run_id: str | None
    prefect_flow_run_id: str | None

    @property
    def config(self) -> dict[str, Any]:
        return dict(json.loads(self.config_json))


@dataclasses.dataclass(frozen=True)
class HarnessRecord:
    sha: str
    text: str
    name: str | None
    parent_sha: str | None
    created: datetime


@dataclasses.dataclass(frozen=True)
class CandidateRecord:
    """One proposal. ``harness_sha`` is None for a proposal that never parsed into a harness; ``text`` is the
    harness text, or that proposal's raw text (None if there was none)."""

    id: int
    run_id: str
    leg_id: int | None
    harness_sha: str | None
    text: str | None
    parent_sha: str | None
    proposer: str
    status: str
    reason: str
    prompt_tokens_per_problem: float | None
    created: datetime


@dataclasses.dataclass(frozen=True)
class CheckpointRecord:
    id: str
    run_id: str
    path: str
    parent_id: str | None
    harness_sha: str
    leg_id: int | None
    step: int | None
    created: datetime
    mlflow_model_id: str | None


@dataclasses.dataclass(frozen=True)
class EvaluationRecord:
    id: int
    run_id: str
    harness_sha: str
    checkpoint_id: str
    split: str
    subset: str
    score: float
    n: int
    completions: int
    prompt_tokens: int
    completion_tokens: int
    traces_path: str | None
    created: datetime


@dataclasses.dataclass(frozen=True)
class LegRecord:
    id: int
    run_id: str
    iteration: int
    kind: str
    status: str
    started: datetime
    finished: datetime | None
    budget_used: int
    mlflow_run_id: str | None
    incumbent_harness_in: str | None
    incumbent_harness_out: str | None
    checkpoint_in: str | None
    checkpoint_out: str | None
    metrics_json: str

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(json.loads(self.metrics_json))


@dataclasses.dataclass(frozen=True)
class DecisionRecord:
    id: int
    run_id: str
    iteration: int
    kind: str
    reason: str
    payload_json: str
    created: datetime

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.payload_json))


R = TypeVar("R")


# Fields that hold a file path, stored relative to the home when under it (`whale_core.records.portable`).
_PATH_FIELDS = {"CheckpointRecord": "path", "EvaluationRecord": "traces_path"}


def _record(cls: type[R], row: Any, **extra: Any) -> R:
    values: dict[str, Any] = {}
    path_field = _PATH_FIELDS.get(cls.__name__)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        v = extra[f.name] if f.name in extra else getattr(row, f.name)
        if isinstance(v, datetime) and v.tzinfo is None:
            v = v.replace(tzinfo=UTC)  # SQLite drops the zone; everything is written in UTC
        if f.name == path_field and isinstance(v, str):
            v = from_home(v)  # a relative path is under the current home; an old absolute one as stored
        values[f.name] = v
    return cls(**values)


def _dumps(obj: Mapping[str, Any] | str | None) -> str:
    if obj is None:
        return "{}"
    if isinstance(obj, str):
        json.loads(obj)  # must be valid JSON
        return obj
    return json.dumps(dict(obj), sort_keys=True, default=str)


def _once_more_on_race(put: Callable[[], R]) -> R:
    """Run an idempotent get-or-insert; if a concurrent writer inserted the same key first (IntegrityError on
    PostgreSQL; SQLite serializes writers with BEGIN IMMEDIATE), run it once more to read that row."""
    try:
        return put()
    except IntegrityError:
        return put()
