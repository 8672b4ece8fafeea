"""What happened in a run: evaluations (and the best one of each harness), legs, and decisions.

`RunHistory` is a part of `Archive` (its methods share the archive's engine and sessions; see the package docstring);
it lives here so that the store's plumbing, runs, harnesses, candidates and checkpoints (`store`) stay one module.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from whale_core.records.archive.readonly import writes
from whale_core.records.archive.records import DecisionRecord, EvaluationRecord, LegRecord, _dumps, _record
from whale_core.records.archive.tables import (
    CandidateRow,
    DecisionRow,
    EvalSplit,
    EvaluationRow,
    LegKind,
    LegRow,
    LegStatus,
    RecordNotFound,
    _check,
    _now,
)
from whale_core.records.portable import to_home


class RunHistory:
    """The evaluations, legs and decisions of runs (mixed into `Archive`)."""

    engine: Engine
    safe_url: str
    read_only: bool

    # Declared for the type checker only: `Archive` (store.py), its one subclass, overrides both (a
    # read session; a write session that a read-only view refuses). RunHistory is never used on its own.
    def _read(self) -> AbstractContextManager[Session]:
        raise NotImplementedError("provided by Archive")

    def _write(self) -> AbstractContextManager[Session]:
        raise NotImplementedError("provided by Archive")

    # -- evaluations
    @writes
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
                "traces_path": None if traces_path is None else to_home(traces_path), "created": _now()}  # fmt: skip
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

    def best_evaluations(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        split: str = "val",
        as_of: datetime | None = None,
        exclude: str | None = None,
    ) -> dict[str, EvaluationRecord]:
        """The best evaluation of each harness in a run: per harness sha, the one with the largest ``n``, then the
        latest (highest id). ``checkpoint_id`` None: under any checkpoint; ``as_of``: only evaluations created
        before it (a resumed or rerun leg sees what its first attempt saw); ``exclude``: one sha left out.
        Insertion order: first evaluation of each harness first."""
        cutoff = as_of.replace(tzinfo=None) if as_of is not None else None
        best: dict[str, EvaluationRecord] = {}
        for ev in self.evaluations(run_id, checkpoint_id=checkpoint_id, split=split):
            if ev.harness_sha == exclude or (cutoff is not None and ev.created.replace(tzinfo=None) >= cutoff):
                continue
            cur = best.get(ev.harness_sha)
            if cur is None or (ev.n, ev.id) > (cur.n, cur.id):
                best[ev.harness_sha] = ev
        return best

    # -- legs
    @writes
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

    @writes
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

    @writes
    def fail_leg(self, leg_id: int, error: str, *, budget_used: int | None = None) -> LegRecord:
        """Mark a leg failed; the error text is kept in its metrics as ``{"error": ...}``."""
        return self._end_leg(leg_id, "failed", budget_used=budget_used, metrics_json=_dumps({"error": error}))

    @writes
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

    @writes
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
    @writes
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

    @writes
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
