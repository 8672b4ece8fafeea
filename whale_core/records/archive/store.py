"""`Archive`: one engine per store, one short session per method call; runs, harnesses, candidates, checkpoints.

The evaluations, legs and decisions are `whale_core.records.archive.history.RunHistory` (mixed in); a read-only view
(`Archive.read_only_view`) skips every write (`whale_core.records.archive.readonly`)."""

from __future__ import annotations

import copy
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Engine,
    create_engine,
    event,
    insert,
    inspect,
    make_url,
    select,
)
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from whale_core.env import sqlite_url, whale_home
from whale_core.records.archive.history import RunHistory
from whale_core.records.archive.readonly import writes
from whale_core.records.archive.records import (
    CandidateRecord,
    CheckpointRecord,
    HarnessRecord,
    RunRecord,
    _dumps,
    _once_more_on_race,
    _record,
)
from whale_core.records.archive.tables import (
    SCHEMA_VERSION,
    ArchiveError,
    Base,
    CandidateRow,
    CandidateStatus,
    CheckpointRow,
    HarnessRow,
    RecordNotFound,
    RunCheckpointRow,
    RunRow,
    RunStatus,
    SchemaVersionError,
    SchemaVersionRow,
    _check,
    _now,
)
from whale_core.records.portable import to_home


def default_url() -> str:
    """``$WHALE_DB_URL`` if set, else ``sqlite:///$WHALE_HOME/whale.db``."""
    return os.environ.get("WHALE_DB_URL") or sqlite_url(whale_home() / "whale.db")


# ------------------------------------------------------------------------------------------------------------ archive
class Archive(RunHistory):
    """The SQL store (see the package docstring). Use as a context manager or call ``close()``."""

    def __init__(self, url: str | None = None, *, busy_timeout_s: float = 30.0) -> None:
        """Open (and on first use create) the store at ``url`` (default `default_url`).

        Raises `ArchiveError` with a one-line message for a URL that does not parse or names no installed driver, and
        for a store that cannot be opened (a server that does not answer, a directory that cannot be written, a full
        disk): these are user errors, not bugs."""
        self.url = url or default_url()
        self.read_only = False
        self._owns_engine = True
        try:
            parsed = make_url(self.url)
        except ArgumentError:
            shown = self.url if "@" not in self.url else self.url.split("://", 1)[0] + "://…"
            raise ArchiveError(
                f"archive URL {shown!r} (WHALE_DB_URL or tracking.archive_url) is not a database URL: expected "
                "dialect+driver://user:password@host:port/database or sqlite:///path/to/whale.db"
            ) from None
        self.safe_url = parsed.render_as_string(hide_password=True)
        try:
            self._connect(parsed, busy_timeout_s)
        except ArchiveError:
            raise
        except (NoSuchModuleError, ImportError) as exc:
            raise ArchiveError(
                f"archive URL {self.safe_url} needs a database driver that is not installed ({type(exc).__name__}: "
                f"{exc}); for PostgreSQL install WHALE's postgres extra (pip install -c constraints.txt -e "
                "'.[postgres]') and name its driver: postgresql+psycopg2://"
            ) from None
        except (DBAPIError, OSError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise ArchiveError(
                f"cannot open the archive {self.safe_url}: {reason[0] if reason else type(exc).__name__}"
            ) from None

    def _connect(self, parsed: Any, busy_timeout_s: float) -> None:
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
        if self.read_only:  # a write method not marked `writes`: refuse rather than write during a replay
            raise ArchiveError(f"read-only view of {self.safe_url}: a write method is not marked @writes")
        with Session(self._write_engine) as s, s.begin():
            yield s

    def read_only_view(self) -> Archive:
        """This archive, read-only: reads pass through, every write returns `SKIPPED` and stores nothing. Shares
        this archive's engine (closing the view closes nothing)."""
        view = copy.copy(self)
        view.read_only, view._owns_engine = True, False
        return view

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        with self._read() as s:
            return int(s.execute(select(SchemaVersionRow.version)).scalar_one())

    # -- runs
    @writes
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

    @writes
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
    @writes
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

    @writes
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

    @writes
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
    @writes
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
        """Store a checkpoint under its content id, and ``run_id``'s own copy of it at ``path``. The checkpoint row
        is written once (later calls only fill a missing ``mlflow_model_id``); the run's row names the run's latest
        copy (a rerun's new generation replaces the old one). A ``path`` under the home is stored relative to it
        (`whale_core.records.portable`); records read it back absolute, under the current home. Returns the
        checkpoint as ``run_id`` holds it."""

        def put() -> CheckpointRecord:
            with self._write() as s:
                row = s.get(CheckpointRow, checkpoint_id)
                if row is None:
                    row = CheckpointRow(
                        id=checkpoint_id, run_id=run_id, path=to_home(path), parent_id=parent_id,
                        harness_sha=harness_sha, leg_id=leg_id, step=step, created=_now(),
                        mlflow_model_id=mlflow_model_id,
                    )  # fmt: skip
                    s.add(row)
                elif row.mlflow_model_id is None and mlflow_model_id is not None:
                    row.mlflow_model_id = mlflow_model_id
                own = s.get(RunCheckpointRow, (run_id, checkpoint_id))
                if own is None:
                    own = RunCheckpointRow(run_id=run_id, checkpoint_id=checkpoint_id, path=to_home(path),
                                           created=_now())  # fmt: skip
                    s.add(own)
                else:
                    own.path = to_home(path)
                s.flush()
                return _record(CheckpointRecord, row, run_id=run_id, path=own.path)

        return _once_more_on_race(put)

    def find_checkpoint(self, checkpoint_id: str, run_id: str | None = None) -> CheckpointRecord | None:
        """A checkpoint by content id: as ``run_id`` holds it (its own copy's path) when given and held, else as first
        stored."""
        with self._read() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                return None
            own = s.get(RunCheckpointRow, (run_id, checkpoint_id)) if run_id is not None else None
            if own is None:
                return _record(CheckpointRecord, row)
            return _record(CheckpointRecord, row, run_id=run_id, path=own.path)

    def checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        """The checkpoints a run holds, oldest first, each at the run's own copy (archives written before the
        per-run rows: the checkpoints first stored by the run)."""
        with self._read() as s:
            owned = s.execute(
                select(CheckpointRow, RunCheckpointRow.path)
                .join(RunCheckpointRow, RunCheckpointRow.checkpoint_id == CheckpointRow.id)
                .where(RunCheckpointRow.run_id == run_id)
                .order_by(RunCheckpointRow.created)
            ).all()
            out = [_record(CheckpointRecord, row, run_id=run_id, path=path) for row, path in owned]
            seen = {c.id for c in out}
            q = select(CheckpointRow).where(CheckpointRow.run_id == run_id).order_by(CheckpointRow.created)
            out += [_record(CheckpointRecord, r) for r in s.scalars(q) if r.id not in seen]
            return out
