"""The archive's schema: SQLAlchemy ORM tables, the status vocabularies, and the archive's errors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from whale_core.errors import WhaleError

SCHEMA_VERSION = 1
RunStatus = Literal["running", "finished", "failed", "stopped"]
# "interrupted": a candidate of a leg attempt that ended before it was judged (a killed process); the attempt's leg
# is "interrupted" too. "superseded": a done leg that ``whale rerun`` recomputed. Both stay as history.
CandidateStatus = Literal["proposed", "rejected", "scored", "accepted", "lost", "interrupted"]
LegKind = Literal["weights", "harness", "eval"]
LegStatus = Literal["running", "done", "failed", "interrupted", "superseded"]
EvalSplit = Literal["train", "val", "test"]


class ArchiveError(WhaleError, RuntimeError):
    """Base class for archive errors."""


class SchemaVersionError(ArchiveError):
    """The database was written with a schema version this code does not read."""


class RecordNotFound(ArchiveError, LookupError):
    """A ``get_*`` lookup named a record that is not in the archive."""


def _now() -> datetime:
    return datetime.now(UTC)


def _check(value: str, allowed: Any, what: str) -> None:
    if value not in get_args(allowed):
        raise ValueError(f"invalid {what} {value!r}; expected one of {list(get_args(allowed))}")


# ---------------------------------------------------------------------------------------------------------------- ORM
class Base(DeclarativeBase):
    """Declarative base of the archive tables."""


class SchemaVersionRow(Base):
    __tablename__ = "schema_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(40))
    config_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    prefect_flow_run_id: Mapped[str | None] = mapped_column(String(64))


class HarnessRow(Base):
    __tablename__ = "harnesses"
    sha: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(String(200))
    parent_sha: Mapped[str | None] = mapped_column(String(64))
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LegRow(Base):
    __tablename__ = "legs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    iteration: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    started: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    budget_used: Mapped[int] = mapped_column(Integer)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    incumbent_harness_in: Mapped[str | None] = mapped_column(String(64))
    incumbent_harness_out: Mapped[str | None] = mapped_column(String(64))
    checkpoint_in: Mapped[str | None] = mapped_column(String(128))
    checkpoint_out: Mapped[str | None] = mapped_column(String(128))
    metrics_json: Mapped[str] = mapped_column(Text)


class CandidateRow(Base):
    __tablename__ = "candidates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    leg_id: Mapped[int | None] = mapped_column(ForeignKey("legs.id"))
    harness_sha: Mapped[str | None] = mapped_column(ForeignKey("harnesses.sha"))  # None: never parsed
    raw_text: Mapped[str | None] = mapped_column(Text)  # a proposal's text when it never became a harness
    parent_sha: Mapped[str | None] = mapped_column(String(64))
    proposer: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text)
    prompt_tokens_per_problem: Mapped[float | None] = mapped_column(Float)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CheckpointRow(Base):
    __tablename__ = "checkpoints"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    path: Mapped[str] = mapped_column(Text)
    parent_id: Mapped[str | None] = mapped_column(String(128))
    harness_sha: Mapped[str] = mapped_column(ForeignKey("harnesses.sha"))
    leg_id: Mapped[int | None] = mapped_column(ForeignKey("legs.id"))
    step: Mapped[int | None] = mapped_column(Integer)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    mlflow_model_id: Mapped[str | None] = mapped_column(String(64))


class RunCheckpointRow(Base):
    """Where a run holds a checkpoint: its own copy. A checkpoint's id is its content, so one id can belong to several
    runs (two runs of one config) or to one run twice (``whale rerun`` trains a new generation): `CheckpointRow` keeps
    the first copy, this row each run's latest. Added beside the version-1 tables (an older archive gains it empty)."""

    __tablename__ = "run_checkpoints"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(ForeignKey("checkpoints.id"), primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    __table_args__ = (
        UniqueConstraint("run_id", "harness_sha", "checkpoint_id", "split", "subset", name="uq_evaluation_key"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    harness_sha: Mapped[str] = mapped_column(ForeignKey("harnesses.sha"))
    checkpoint_id: Mapped[str] = mapped_column(String(128))
    split: Mapped[str] = mapped_column(String(10))
    subset: Mapped[str] = mapped_column(String(100))
    score: Mapped[float] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer)
    completions: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    traces_path: Mapped[str | None] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DecisionRow(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    iteration: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(40))
    reason: Mapped[str] = mapped_column(Text)
    payload_json: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# ------------------------------------------------------------------------------------------------------------ records
