"""`Archive`: one engine per store, one short session per method call."""

from __future__ import annotations

import dataclasses
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

from whale_core.env import whale_home
from whale_core.legs.selection import pareto_front
from whale_core.records.archive.records import (
    CandidateRecord,
    CheckpointRecord,
    DecisionRecord,
    EvaluationRecord,
    HarnessRecord,
    LeaderboardRow,
    LegRecord,
    RunRecord,
    ScoredHarness,
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
    DecisionRow,
    EvalSplit,
    EvaluationRow,
    HarnessRow,
    LegKind,
    LegRow,
    LegStatus,
    RecordNotFound,
    RunRow,
    RunStatus,
    SchemaVersionError,
    SchemaVersionRow,
    _check,
    _now,
)


def default_url() -> str:
    """``$WHALE_DB_URL`` if set, else ``sqlite:///$WHALE_HOME/whale.db``."""
    return os.environ.get("WHALE_DB_URL") or f"sqlite:///{whale_home() / 'whale.db'}"


# ------------------------------------------------------------------------------------------------------------ archive
class Archive:
    """The SQL store (see the module docstring). Use as a context manager or call ``close()``."""

    def __init__(self, url: str | None = None, *, busy_timeout_s: float = 30.0) -> None:
        """Open (and on first use create) the store at ``url`` (default `default_url`).

        Raises `ArchiveError` with a one-line message for a URL that does not parse or names no installed driver, and
        for a store that cannot be opened (a server that does not answer, a directory that cannot be written, a full
        disk): these are user errors, not bugs."""
        self.url = url or default_url()
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

    def end_attempt(self, leg_id: int, status: LegStatus, reason: str) -> LegRecord:
        """Close an earlier attempt of a leg as history: ``interrupted`` (it was still ``running`` when its process
        died) or ``superseded`` (a done leg that ``whale rerun`` recomputes). Its metrics become ``{"error":
        reason}``; its candidates still ``proposed`` (never judged) become ``interrupted``. One transaction."""
        if status not in ("interrupted", "superseded"):
            raise ValueError(f"invalid attempt status {status!r}; expected one of ['interrupted', 'superseded']")
        with self._write() as s:
            row = s.get(LegRow, leg_id)
            if row is None:
                raise RecordNotFound(f"no leg {leg_id} in {self.safe_url}")
            row.status, row.finished, row.metrics_json = status, _now(), _dumps({"error": reason})
            open_candidates = select(CandidateRow).where(CandidateRow.leg_id == leg_id)
            for cand in s.scalars(open_candidates.where(CandidateRow.status == "proposed")):
                cand.status, cand.reason = "interrupted", f"never judged: its leg was {status} ({reason})"
            s.flush()
            return _record(LegRecord, row)

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

    def ensure_decision(
        self, run_id: str, iteration: int, kind: str, reason: str, payload: Mapping[str, Any] | None = None
    ) -> DecisionRecord:
        """`add_decision`, unless the run already holds this very decision (same iteration, kind, reason and
        payload): a resumed run re-takes the decisions of the iteration it was killed in, and must not store them
        twice. Returns the stored record either way."""
        payload_json = _dumps(payload)
        with self._write() as s:
            q = select(DecisionRow).where(
                DecisionRow.run_id == run_id,
                DecisionRow.iteration == iteration,
                DecisionRow.kind == kind,
                DecisionRow.reason == reason,
                DecisionRow.payload_json == payload_json,
            )
            row = s.scalars(q.order_by(DecisionRow.id).limit(1)).first()
            if row is None:
                row = DecisionRow(run_id=run_id, iteration=iteration, kind=kind, reason=reason,
                                  payload_json=payload_json, created=_now())  # fmt: skip
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
