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

from whale_core.records.archive.records import (
    CandidateRecord,
    CheckpointRecord,
    DecisionRecord,
    EvaluationRecord,
    HarnessRecord,
    LegRecord,
    RunRecord,
)
from whale_core.records.archive.store import Archive, default_url
from whale_core.records.archive.tables import (
    SCHEMA_VERSION,
    ArchiveError,
    CandidateStatus,
    EvalSplit,
    LegKind,
    LegStatus,
    RecordNotFound,
    RunStatus,
    SchemaVersionError,
)

__all__ = [
    "SCHEMA_VERSION",
    "Archive",
    "ArchiveError",
    "CandidateRecord",
    "CandidateStatus",
    "CheckpointRecord",
    "DecisionRecord",
    "EvalSplit",
    "EvaluationRecord",
    "HarnessRecord",
    "LegKind",
    "LegRecord",
    "LegStatus",
    "RecordNotFound",
    "RunRecord",
    "RunStatus",
    "SchemaVersionError",
    "default_url",
]
