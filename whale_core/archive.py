"""The archive: the SQL store of runs, harnesses, candidates, checkpoints, evaluations, legs and decisions.

It is the source of truth for resume: a resumed run reads its legs, incumbent and completed evaluations from here
(``find_evaluation`` on the unique key ``(run_id, harness_sha, checkpoint_id, split, subset)``).

- URL: ``Archive(url)``; default ``$WHALE_DB_URL`` if set, else ``sqlite:///$WHALE_HOME/whale.db``. Any SQLAlchemy
  URL works; SQLite and PostgreSQL (``postgresql+psycopg2://``) are tested.
- SQLite: WAL, ``busy_timeout`` 30 s and foreign keys on every connection; write transactions start with
  ``BEGIN IMMEDIATE`` so two processes writing the same file wait for each other instead of failing on a lock
  upgrade. ``sqlite://`` (memory) uses one shared connection: single-threaded use only.
- One ``Engine`` per ``Archive``, one short session per method call; methods return frozen dataclass records
  (never live ORM objects) whose fields mirror the columns (JSON columns stay text; ``.config`` etc. parse them).
- ``schema_version`` holds the layout version; opening a database written by another version raises
  ``SchemaVersionError``. Simplified: no migrations yet (version 1).
- Harness texts are stored once per sha (``harnesses``); every proposal is a ``candidates`` row, since one text can be
  proposed many times in a run. A text that failed validation is stored too (raw text, sha256 of it) so the rejection
  and its reason stay on record. ``evaluations.checkpoint_id`` is not a foreign key: it may name the base policy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, get_args

from sqlalchemy import (
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    insert,
    inspect,
    make_url,
    select,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool

from whale_core.env import whale_home
from whale_core.selection import pareto_front

SCHEMA_VERSION = 1
RunStatus = Literal["running", "finished", "failed", "stopped"]
CandidateStatus = Literal["proposed", "rejected", "scored", "accepted", "lost"]
LegKind = Literal["weights", "harness", "eval"]
LegStatus = Literal["running", "done", "failed"]
EvalSplit = Literal["train", "val", "test"]


class ArchiveError(RuntimeError):
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
    pass


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


@dataclasses.dataclass(frozen=True)
class LeaderboardRow:
    """One harness's best-covered evaluation (largest ``n``, then latest) for a run, checkpoint and split."""

    harness_sha: str
    name: str | None
    score: float
    n: int
    subset: str
    prompt_tokens_per_problem: float  # evaluation prompt_tokens / n
    status: str  # "accepted" if ever accepted in the run, else the latest candidate status; "evaluated": no candidate
    parent_sha: str | None
    pareto: bool  # on the front of score (max) vs prompt tokens per problem (min), among all evaluated harnesses


@dataclasses.dataclass(frozen=True)
class ScoredHarness:
    """A leaderboard row with the harness text (what a proposer is shown); ``prompt_tokens`` is per problem."""

    sha: str
    name: str | None
    text: str
    score: float
    n: int
    status: str
    parent_sha: str | None
    prompt_tokens: float
    pareto: bool


R = TypeVar("R")


def _record(cls: type[R], row: Any, **extra: Any) -> R:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        v = extra[f.name] if f.name in extra else getattr(row, f.name)
        if isinstance(v, datetime) and v.tzinfo is None:
            v = v.replace(tzinfo=UTC)  # SQLite drops the zone; everything is written in UTC
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


def default_url() -> str:
    """``$WHALE_DB_URL`` if set, else ``sqlite:///$WHALE_HOME/whale.db``."""
    return os.environ.get("WHALE_DB_URL") or f"sqlite:///{whale_home() / 'whale.db'}"


# ------------------------------------------------------------------------------------------------------------ archive
class Archive:
    """The SQL store (see the module docstring). Use as a context manager or call ``close()``."""

    def __init__(self, url: str | None = None, *, busy_timeout_s: float = 30.0) -> None:
        self.url = url or default_url()
        parsed = make_url(self.url)
        self.safe_url = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            db = parsed.database
            memory = not db or db == ":memory:" or "mode=memory" in self.url
            kwargs: dict[str, Any] = {"connect_args": {"timeout": busy_timeout_s, "check_same_thread": False}}
            if memory:
                kwargs["poolclass"] = StaticPool
            elif db:
                os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
            self.engine: Engine = create_engine(self.url, **kwargs)
            ms = int(busy_timeout_s * 1000)

            @event.listens_for(self.engine, "connect")
            def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _sqlite_begin)
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout={ms}")
                if not memory:
                    cur.execute("PRAGMA journal_mode=WAL")
                    cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

            @event.listens_for(self.engine, "begin")
            def _sqlite_begin(conn: Any) -> None:
                write = conn.get_execution_options().get("whale_write", False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
        else:
            self.engine = create_engine(self.url, pool_pre_ping=True)
        self._write_engine = self.engine.execution_options(whale_write=True)
        self._open_schema()

    # -- plumbing
    def _open_schema(self) -> None:
        for attempt in range(4):
            try:
                with self._write_engine.begin() as conn:
                    found: int | None = None
                    if inspect(conn).has_table("schema_version"):
                        found = conn.execute(select(SchemaVersionRow.version)).scalars().first()
                    if found is not None and found != SCHEMA_VERSION:
                        newer = "newer" if found > SCHEMA_VERSION else "older"
                        raise SchemaVersionError(
                            f"archive {self.safe_url} has schema version {found} ({newer}); this WHALE reads version "
                            f"{SCHEMA_VERSION} only: " + ("upgrade WHALE" if found > SCHEMA_VERSION else "no migration")
                        )
                    Base.metadata.create_all(conn)
                    if found is None:
                        conn.execute(insert(SchemaVersionRow).values(id=1, version=SCHEMA_VERSION))
                return
            except (OperationalError, IntegrityError, ProgrammingError):  # another process creating at the same time
                if attempt == 3:
                    raise
                time.sleep(0.2 * (attempt + 1))

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine) as s, s.begin():
            yield s

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._write_engine) as s, s.begin():
            yield s

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        with self._read() as s:
            return int(s.execute(select(SchemaVersionRow.version)).scalar_one())

    # -- runs
    def create_run(
        self,
        name: str,
        mode: str,
        config: Mapping[str, Any] | str | None = None,
        *,
        run_id: str | None = None,
        status: RunStatus = "running",
    ) -> RunRecord:
        _check(status, RunStatus, "run status")
        now = _now()
        row = RunRow(
            id=run_id or uuid.uuid4().hex[:12], name=name, mode=mode, config_json=_dumps(config), status=status,
            created=now, updated=now, mlflow_run_id=None, prefect_flow_run_id=None,
        )  # fmt: skip
        with self._write() as s:
            if s.get(RunRow, row.id) is not None:
                raise ArchiveError(f"run {row.id!r} already exists in {self.safe_url}")
            s.add(row)
            s.flush()
            return _record(RunRecord, row)

    def get_run(self, run_id: str) -> RunRecord:
        with self._read() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RecordNotFound(f"no run {run_id!r} in {self.safe_url}")
            return _record(RunRecord, row)

    def runs(self) -> list[RunRecord]:
        with self._read() as s:
            return [_record(RunRecord, r) for r in s.scalars(select(RunRow).order_by(RunRow.created, RunRow.id))]

    def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        config: Mapping[str, Any] | str | None = None,
        mlflow_run_id: str | None = None,
        prefect_flow_run_id: str | None = None,
    ) -> RunRecord:
        """Set the given fields (``None`` leaves a field unchanged)."""
        if status is not None:
            _check(status, RunStatus, "run status")
        with self._write() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RecordNotFound(f"no run {run_id!r} in {self.safe_url}")
            if status is not None:
                row.status = status
            if config is not None:
                row.config_json = _dumps(config)
            if mlflow_run_id is not None:
                row.mlflow_run_id = mlflow_run_id
            if prefect_flow_run_id is not None:
                row.prefect_flow_run_id = prefect_flow_run_id
            row.updated = _now()
            s.flush()
            return _record(RunRecord, row)

    # -- harnesses and candidates
    def put_harness(self, sha: str, text: str, name: str | None = None, parent_sha: str | None = None) -> HarnessRecord:
        """Store a harness text under its sha; idempotent. A different text under a stored sha raises."""

        def put() -> HarnessRecord:
            with self._write() as s:
                row = s.get(HarnessRow, sha)
                if row is None:
                    row = HarnessRow(sha=sha, text=text, name=name, parent_sha=parent_sha, created=_now())
                    s.add(row)
                    s.flush()
                elif row.text != text:
                    raise ArchiveError(f"harness {sha[:12]} is already stored with a different text")
                return _record(HarnessRecord, row)

        return _once_more_on_race(put)

    def find_harness(self, sha: str) -> HarnessRecord | None:
        with self._read() as s:
            row = s.get(HarnessRow, sha)
            return None if row is None else _record(HarnessRecord, row)

    def get_harness(self, sha: str) -> HarnessRecord:
        rec = self.find_harness(sha)
        if rec is None:
            raise RecordNotFound(f"no harness {sha[:12]} in {self.safe_url}")
        return rec

    def add_candidate(
        self,
        run_id: str,
        harness_sha: str | None,
        *,
        proposer: str,
        parent_sha: str | None = None,
        leg_id: int | None = None,
        status: CandidateStatus = "proposed",
        reason: str | None = None,
        prompt_tokens_per_problem: float | None = None,
        text: str | None = None,
    ) -> CandidateRecord:
        """One proposal in a run. A harness (``harness_sha``) must be stored first (``put_harness``); ``text``, if
        given, must then be its text. A proposal that never parsed has ``harness_sha=None`` and keeps its raw
        ``text`` (or none) with the candidate."""
        _check(status, CandidateStatus, "candidate status")
        with self._write() as s:
            stored: str | None = None
            if harness_sha is not None:
                h = s.get(HarnessRow, harness_sha)
                if h is None:
                    raise RecordNotFound(f"candidate names harness {harness_sha[:12]}, which is not stored")
                if text is not None and text != h.text:
                    raise ArchiveError(f"candidate text differs from stored harness {harness_sha[:12]}")
                stored = h.text
            row = CandidateRow(
                run_id=run_id, leg_id=leg_id, harness_sha=harness_sha, raw_text=None if harness_sha else text,
                parent_sha=parent_sha, proposer=proposer, status=status, reason=reason or "",
                prompt_tokens_per_problem=prompt_tokens_per_problem, created=_now(),
            )  # fmt: skip
            s.add(row)
            s.flush()
            return _record(CandidateRecord, row, text=stored if harness_sha else text)

    def _candidate(self, s: Session, row: CandidateRow) -> CandidateRecord:
        h = s.get(HarnessRow, row.harness_sha) if row.harness_sha else None
        return _record(CandidateRecord, row, text=h.text if h is not None else row.raw_text)

    def set_candidate_status(
        self,
        candidate: int | CandidateRecord,
        status: CandidateStatus,
        reason: str | None = None,
        *,
        prompt_tokens_per_problem: float | None = None,
    ) -> CandidateRecord:
        """Set a candidate's status (``candidate``: its id or the record ``add_candidate`` returned)."""
        _check(status, CandidateStatus, "candidate status")
        cid = candidate.id if isinstance(candidate, CandidateRecord) else candidate
        with self._write() as s:
            row = s.get(CandidateRow, cid)
            if row is None:
                raise RecordNotFound(f"no candidate {cid} in {self.safe_url}")
            row.status = status
            if reason is not None:
                row.reason = reason
            if prompt_tokens_per_problem is not None:
                row.prompt_tokens_per_problem = prompt_tokens_per_problem
            s.flush()
            return self._candidate(s, row)

    def candidates(
        self, run_id: str, *, leg_id: int | None = None, status: CandidateStatus | None = None
    ) -> list[CandidateRecord]:
        q = select(CandidateRow, HarnessRow.text).outerjoin(HarnessRow, CandidateRow.harness_sha == HarnessRow.sha)
        q = q.where(CandidateRow.run_id == run_id)
        if leg_id is not None:
            q = q.where(CandidateRow.leg_id == leg_id)
        if status is not None:
            q = q.where(CandidateRow.status == status)
        with self._read() as s:
            return [
                _record(CandidateRecord, row, text=htext if row.harness_sha else row.raw_text)
                for row, htext in s.execute(q.order_by(CandidateRow.id)).tuples()
            ]

    def rejections(self, run_id: str) -> list[CandidateRecord]:
        """Rejected candidates of a run with their reasons, oldest first (what proposers should not repeat)."""
        return self.candidates(run_id, status="rejected")

    # -- checkpoints
    def put_checkpoint(
        self,
        checkpoint_id: str,
        run_id: str,
        path: str,
        harness_sha: str,
        *,
        parent_id: str | None = None,
        leg_id: int | None = None,
        step: int | None = None,
        mlflow_model_id: str | None = None,
    ) -> CheckpointRecord:
        """Store a checkpoint under its content id; idempotent (an existing id is returned unchanged, except that a
        missing ``mlflow_model_id`` is filled in)."""

        def put() -> CheckpointRecord:
            with self._write() as s:
                row = s.get(CheckpointRow, checkpoint_id)
                if row is None:
                    row = CheckpointRow(
                        id=checkpoint_id, run_id=run_id, path=path, parent_id=parent_id, harness_sha=harness_sha,
                        leg_id=leg_id, step=step, created=_now(), mlflow_model_id=mlflow_model_id,
                    )  # fmt: skip
                    s.add(row)
                elif row.mlflow_model_id is None and mlflow_model_id is not None:
                    row.mlflow_model_id = mlflow_model_id
                s.flush()
                return _record(CheckpointRecord, row)

        return _once_more_on_race(put)

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        with self._read() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            return None if row is None else _record(CheckpointRecord, row)

    def checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        q = select(CheckpointRow).where(CheckpointRow.run_id == run_id).order_by(CheckpointRow.created)
        with self._read() as s:
            return [_record(CheckpointRecord, r) for r in s.scalars(q)]

    # -- evaluations
    def record_evaluation(
        self,
        run_id: str,
        harness_sha: str,
        checkpoint_id: str,
        split: EvalSplit,
        subset: str,
        *,
        score: float,
        n: int,
        completions: int,
        prompt_tokens: int,
        completion_tokens: int,
        traces_path: str | None = None,
    ) -> EvaluationRecord:
        """Insert or replace the evaluation on the key ``(run_id, harness_sha, checkpoint_id, split, subset)``."""
        _check(split, EvalSplit, "split")
        key = {"run_id": run_id, "harness_sha": harness_sha, "checkpoint_id": checkpoint_id, "split": split,
               "subset": subset}  # fmt: skip
        vals = {"score": float(score), "n": int(n), "completions": int(completions),
                "prompt_tokens": int(prompt_tokens), "completion_tokens": int(completion_tokens),
                "traces_path": traces_path, "created": _now()}  # fmt: skip
        dialect = self.engine.dialect.name
        with self._write() as s:
            if dialect == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as sqlite_insert

                lite = sqlite_insert(EvaluationRow).values(**key, **vals)
                s.execute(lite.on_conflict_do_update(index_elements=list(key), set_=vals))
            elif dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                pg = pg_insert(EvaluationRow).values(**key, **vals)
                s.execute(pg.on_conflict_do_update(index_elements=list(key), set_=vals))
            else:  # portable fallback: not race-free across processes
                row = s.scalars(select(EvaluationRow).filter_by(**key)).first()
                if row is None:
                    s.add(EvaluationRow(**key, **vals))
                else:
                    for k, v in vals.items():
                        setattr(row, k, v)
                s.flush()
            got = s.scalars(select(EvaluationRow).filter_by(**key).execution_options(populate_existing=True)).one()
            return _record(EvaluationRecord, got)

    def find_evaluation(
        self, run_id: str, harness_sha: str, checkpoint_id: str, split: str, subset: str
    ) -> EvaluationRecord | None:
        """The completed evaluation on this key, or ``None`` (a resumed run reuses it instead of re-scoring)."""
        key = {"run_id": run_id, "harness_sha": harness_sha, "checkpoint_id": checkpoint_id, "split": split,
               "subset": subset}  # fmt: skip
        with self._read() as s:
            row = s.scalars(select(EvaluationRow).filter_by(**key)).first()
            return None if row is None else _record(EvaluationRecord, row)

    def evaluations(
        self, run_id: str, *, checkpoint_id: str | None = None, split: str | None = None
    ) -> list[EvaluationRecord]:
        q = select(EvaluationRow).where(EvaluationRow.run_id == run_id)
        if checkpoint_id is not None:
            q = q.where(EvaluationRow.checkpoint_id == checkpoint_id)
        if split is not None:
            q = q.where(EvaluationRow.split == split)
        with self._read() as s:
            return [_record(EvaluationRecord, r) for r in s.scalars(q.order_by(EvaluationRow.id))]

    # -- legs
    def start_leg(
        self,
        run_id: str,
        iteration: int,
        kind: LegKind,
        *,
        incumbent_harness_in: str | None = None,
        checkpoint_in: str | None = None,
        mlflow_run_id: str | None = None,
    ) -> LegRecord:
        _check(kind, LegKind, "leg kind")
        row = LegRow(
            run_id=run_id, iteration=iteration, kind=kind, status="running", started=_now(), finished=None,
            budget_used=0, mlflow_run_id=mlflow_run_id, incumbent_harness_in=incumbent_harness_in,
            incumbent_harness_out=None, checkpoint_in=checkpoint_in, checkpoint_out=None, metrics_json="{}",
        )  # fmt: skip
        with self._write() as s:
            s.add(row)
            s.flush()
            return _record(LegRecord, row)

    def _end_leg(self, leg_id: int, status: LegStatus, **changes: Any) -> LegRecord:
        with self._write() as s:
            row = s.get(LegRow, leg_id)
            if row is None:
                raise RecordNotFound(f"no leg {leg_id} in {self.safe_url}")
            row.status = status
            row.finished = _now()
            for k, v in changes.items():
                if v is not None:
                    setattr(row, k, v)
            s.flush()
            return _record(LegRecord, row)

    def finish_leg(
        self,
        leg_id: int,
        *,
        budget_used: int,
        incumbent_harness_out: str | None = None,
        checkpoint_out: str | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> LegRecord:
        return self._end_leg(
            leg_id, "done", budget_used=int(budget_used), incumbent_harness_out=incumbent_harness_out,
            checkpoint_out=checkpoint_out, metrics_json=None if metrics is None else _dumps(metrics),
        )  # fmt: skip

    def fail_leg(self, leg_id: int, error: str, *, budget_used: int | None = None) -> LegRecord:
        """Mark a leg failed; the error text is kept in its metrics as ``{"error": ...}``."""
        return self._end_leg(leg_id, "failed", budget_used=budget_used, metrics_json=_dumps({"error": error}))

    def set_leg_mlflow_run(self, leg_id: int, mlflow_run_id: str) -> LegRecord:
        with self._write() as s:
            row = s.get(LegRow, leg_id)
            if row is None:
                raise RecordNotFound(f"no leg {leg_id} in {self.safe_url}")
            row.mlflow_run_id = mlflow_run_id
            s.flush()
            return _record(LegRecord, row)

    def legs(self, run_id: str) -> list[LegRecord]:
        with self._read() as s:
            q = select(LegRow).where(LegRow.run_id == run_id).order_by(LegRow.id)
            return [_record(LegRecord, r) for r in s.scalars(q)]

    def last_leg(self, run_id: str, *, status: LegStatus | None = None) -> LegRecord | None:
        q = select(LegRow).where(LegRow.run_id == run_id)
        if status is not None:
            q = q.where(LegRow.status == status)
        with self._read() as s:
            row = s.scalars(q.order_by(LegRow.id.desc()).limit(1)).first()
            return None if row is None else _record(LegRecord, row)

    # -- decisions
    def add_decision(
        self, run_id: str, iteration: int, kind: str, reason: str, payload: Mapping[str, Any] | None = None
    ) -> DecisionRecord:
        """Record a scheduler/selection decision (kind: accept, reject, switch, stop, ...)."""
        row = DecisionRow(run_id=run_id, iteration=iteration, kind=kind, reason=reason, payload_json=_dumps(payload),
                          created=_now())  # fmt: skip
        with self._write() as s:
            s.add(row)
            s.flush()
            return _record(DecisionRecord, row)

    def decisions(self, run_id: str) -> list[DecisionRecord]:
        with self._read() as s:
            q = select(DecisionRow).where(DecisionRow.run_id == run_id).order_by(DecisionRow.id)
            return [_record(DecisionRecord, r) for r in s.scalars(q)]

    # -- views
    def leaderboard(self, run_id: str, checkpoint_id: str, split: str = "val", top: int = 10) -> list[LeaderboardRow]:
        """Harnesses evaluated in a run against one checkpoint, best first.

        Per harness the evaluation with the largest ``n`` (then the latest) counts. Order: score desc, then prompt
        tokens per problem asc, then sha. Pareto flags are computed over all evaluated harnesses, before ``top``.
        """
        with self._read() as s:
            evals = s.scalars(
                select(EvaluationRow).where(
                    EvaluationRow.run_id == run_id,
                    EvaluationRow.checkpoint_id == checkpoint_id,
                    EvaluationRow.split == split,
                )
            ).all()
            best: dict[str, EvaluationRow] = {}
            for e in evals:
                cur = best.get(e.harness_sha)
                if cur is None or (e.n, e.id) > (cur.n, cur.id):
                    best[e.harness_sha] = e
            shas = list(best)
            harnesses = {h.sha: h for h in s.scalars(select(HarnessRow).where(HarnessRow.sha.in_(shas)))}
            cands = s.scalars(
                select(CandidateRow)
                .where(CandidateRow.run_id == run_id, CandidateRow.harness_sha.in_(shas))
                .order_by(CandidateRow.id)
            ).all()
            status: dict[str, str] = {}
            for c in cands:
                if c.harness_sha is not None and status.get(c.harness_sha) != "accepted":
                    status[c.harness_sha] = c.status
            rows = [
                LeaderboardRow(harness_sha=sha, name=harnesses[sha].name, score=e.score, n=e.n, subset=e.subset,
                               prompt_tokens_per_problem=e.prompt_tokens / e.n if e.n else 0.0,
                               status=status.get(sha, "evaluated"), parent_sha=harnesses[sha].parent_sha, pareto=False)
                for sha, e in best.items()
            ]  # fmt: skip
        flags = pareto_front([(r.score, r.prompt_tokens_per_problem) for r in rows])
        rows = [dataclasses.replace(r, pareto=f) for r, f in zip(rows, flags, strict=True)]
        rows.sort(key=lambda r: (-r.score, r.prompt_tokens_per_problem, r.harness_sha))
        return rows[:top]

    def top_harnesses(self, run_id: str, checkpoint_id: str, n: int, split: str = "val") -> list[ScoredHarness]:
        """The ``n`` best rows of ``leaderboard`` with their harness texts (what a proposer is shown)."""
        board = self.leaderboard(run_id, checkpoint_id, split=split, top=n)
        texts = {r.harness_sha: self.get_harness(r.harness_sha).text for r in board}
        return [
            ScoredHarness(sha=r.harness_sha, name=r.name, text=texts[r.harness_sha], score=r.score, n=r.n,
                          status=r.status, parent_sha=r.parent_sha, prompt_tokens=r.prompt_tokens_per_problem,
                          pareto=r.pareto)
            for r in board
        ]  # fmt: skip
