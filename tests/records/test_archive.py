"""Archive: round trips of every record type on SQLite and PostgreSQL, idempotency, upsert, the best evaluation
per harness, schema version, concurrent writers."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text, update
from sqlalchemy.exc import IntegrityError

from whale_core.records.archive import (
    SCHEMA_VERSION,
    Archive,
    ArchiveError,
    EvalSplit,
    RecordNotFound,
    SchemaVersionError,
    default_url,
)
from whale_core.records.archive.tables import SchemaVersionRow

PG_USERS = ("postgres", "root")


def _pg_admin_url() -> str:
    for user in PG_USERS:
        url = f"postgresql+psycopg2://{user}@127.0.0.1:5432/postgres"
        try:
            eng = create_engine(url)
            with eng.connect() as c:
                c.execute(text("select 1"))
            eng.dispose()
            return url
        except Exception:
            continue
    raise RuntimeError(f"no PostgreSQL login on 127.0.0.1:5432 as any of {PG_USERS}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A throwaway database per test, dropped afterwards (so concurrent test runs never collide)."""
    admin_url = _pg_admin_url()
    name = f"whale_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def archive_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'whale.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def archive(archive_url: str) -> Iterator[Archive]:
    with Archive(archive_url) as a:
        yield a


def _sha(t: str) -> str:
    return hashlib.sha256(t.encode()).hexdigest()


def _harness(a: Archive, body: str, parent: str | None = None) -> str:
    t = f"whale_harness: 1\nname: {body}\n"
    sha = _sha(t)
    a.put_harness(sha, t, body, parent)
    return sha


def test_runs_round_trip(archive: Archive) -> None:
    run = archive.create_run("demo", "whale-fixed", {"budget": {"total": 100}}, run_id="r1")
    assert run.id == "r1" and run.status == "running" and run.config == {"budget": {"total": 100}}
    assert run.created.tzinfo is not None
    with pytest.raises(ArchiveError, match="already exists"):
        archive.create_run("again", "whale-fixed", run_id="r1")
    got = archive.get_run("r1")
    assert got == run
    upd = archive.update_run("r1", status="stopped", mlflow_run_id="m1", prefect_flow_run_id="p1")
    assert (upd.status, upd.mlflow_run_id, upd.prefect_flow_run_id) == ("stopped", "m1", "p1")
    assert upd.updated >= run.updated and upd.name == "demo"
    auto = archive.create_run("auto", "harness-only")
    assert len(auto.id) == 12 and auto.config == {}
    assert [r.id for r in archive.runs()] == ["r1", auto.id]
    with pytest.raises(RecordNotFound, match="nope"):
        archive.get_run("nope")
    with pytest.raises(ValueError, match="run status"):
        archive.update_run("r1", status="exploded")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.status = "x"  # type: ignore[misc]


def test_harnesses_and_candidates(archive: Archive) -> None:
    archive.create_run("demo", "whale-fixed", run_id="r1")
    seed = _harness(archive, "seed")
    again = archive.put_harness(seed, "whale_harness: 1\nname: seed\n", "seed")  # idempotent
    assert again.sha == seed and again.name == "seed" and again.parent_sha is None
    with pytest.raises(ArchiveError, match="different text"):
        archive.put_harness(seed, "other text")
    child = _harness(archive, "child", parent=seed)
    assert archive.get_harness(child).parent_sha == seed
    assert archive.find_harness("0" * 64) is None
    with pytest.raises(RecordNotFound):
        archive.get_harness("0" * 64)

    leg = archive.start_leg("r1", 0, "harness", incumbent_harness_in=seed)
    c1 = archive.add_candidate("r1", child, proposer="mutate", parent_sha=seed, leg_id=leg.id)
    c2 = archive.add_candidate("r1", child, proposer="llm", parent_sha=seed, leg_id=leg.id)  # same text twice
    assert c1.id != c2.id and c1.status == "proposed" and c1.leg_id == leg.id
    r = archive.set_candidate_status(c1.id, "rejected", "template uses an unknown field", prompt_tokens_per_problem=7.5)
    assert (r.status, r.reason, r.prompt_tokens_per_problem) == ("rejected", "template uses an unknown field", 7.5)
    archive.set_candidate_status(c2.id, "scored")
    assert [c.id for c in archive.rejections("r1")] == [c1.id]
    assert archive.rejections("r1")[0].text == archive.get_harness(child).text
    # a proposal that never parsed: no harness, its raw text (or none) kept with the candidate
    raw = archive.add_candidate("r1", None, proposer="llm", status="rejected", reason="not YAML", text="{{oops")
    none = archive.add_candidate("r1", None, proposer="llm", status="rejected", reason="empty reply", text=None)
    assert (raw.harness_sha, raw.text, none.text) == (None, "{{oops", None)
    child_text = archive.get_harness(child).text
    assert [(c.text, c.reason) for c in archive.rejections("r1")] == [
        (child_text, "template uses an unknown field"), ("{{oops", "not YAML"), (None, "empty reply"),
    ]  # fmt: skip
    assert archive.set_candidate_status(c2, "lost", "eliminated").status == "lost"  # the record works as the id
    archive.set_candidate_status(c2.id, "scored")
    with pytest.raises(ArchiveError, match="differs"):
        archive.add_candidate("r1", child, proposer="llm", text="something else")
    with pytest.raises(RecordNotFound, match="not stored"):
        archive.add_candidate("r1", "e" * 64, proposer="llm")
    assert [c.id for c in archive.candidates("r1", leg_id=leg.id)] == [c1.id, c2.id]
    assert [c.id for c in archive.candidates("r1", status="scored")] == [c2.id]
    with pytest.raises(RecordNotFound):
        archive.set_candidate_status(10_000, "lost")
    with pytest.raises(ValueError, match="candidate status"):
        archive.set_candidate_status(c1.id, "great")  # type: ignore[arg-type]
    with pytest.raises(IntegrityError):  # foreign keys are enforced (SQLite too)
        archive.add_candidate("no-such-run", child, proposer="mutate")


def test_checkpoints_idempotent(archive: Archive) -> None:
    archive.create_run("demo", "weights-only", run_id="r1")
    seed = _harness(archive, "seed")
    leg = archive.start_leg("r1", 0, "weights", incumbent_harness_in=seed, checkpoint_in="base")
    ck = archive.put_checkpoint("ck1", "r1", "/x/ck1", seed, parent_id="base", leg_id=leg.id, step=800)
    assert (ck.parent_id, ck.harness_sha, ck.step, ck.mlflow_model_id) == ("base", seed, 800, None)
    same = archive.put_checkpoint("ck1", "r1", "/x/ck1", seed, mlflow_model_id="m-1")
    assert same.path == "/x/ck1" and same.mlflow_model_id == "m-1" and same.created == ck.created
    assert archive.find_checkpoint("ck1") == same
    assert archive.find_checkpoint("nope") is None
    assert [c.id for c in archive.checkpoints("r1")] == ["ck1"]


def test_each_run_holds_its_own_copy_of_a_checkpoint(archive: Archive) -> None:
    """Issue 30, item 7: a checkpoint's id is its content, so it can recur — a second run of one config trains the
    same weights, a rerun trains a new generation of them. Each run's records name its own copy (the latest), so
    deleting another run's directory breaks nothing and a rerun's archive agrees with its summary."""
    archive.create_run("a", "weights-only", run_id="r1")
    archive.create_run("b", "weights-only", run_id="r2")
    seed = _harness(archive, "seed")
    archive.put_checkpoint("ck1", "r1", "/runs/r1/iter-01-weights/gen-0/checkpoint", seed, step=8)
    archive.put_checkpoint("ck1", "r2", "/runs/r2/iter-01-weights/gen-0/checkpoint", seed, step=8)
    archive.put_checkpoint("ck1", "r1", "/runs/r1/iter-01-weights/gen-2/checkpoint", seed, step=8)  # a rerun
    assert [(c.id, c.run_id, c.path) for c in archive.checkpoints("r1")] == [
        ("ck1", "r1", "/runs/r1/iter-01-weights/gen-2/checkpoint")
    ]
    assert archive.find_checkpoint("ck1", "r2").path == "/runs/r2/iter-01-weights/gen-0/checkpoint"  # type: ignore[union-attr]
    assert archive.find_checkpoint("ck1").path == "/runs/r1/iter-01-weights/gen-0/checkpoint"  # type: ignore[union-attr]
    assert archive.find_checkpoint("ck1", "r3") == archive.find_checkpoint("ck1")  # a run that holds none: the first


def test_evaluation_upsert_and_lookup(archive: Archive) -> None:
    archive.create_run("demo", "whale-fixed", run_id="r1")
    archive.create_run("other", "whale-fixed", run_id="r2")
    h = _harness(archive, "seed")
    key: tuple[str, str, str, EvalSplit, str] = ("r1", h, "base", "val", "val:64@seed0")
    assert archive.find_evaluation(*key) is None
    e1 = archive.record_evaluation(
        *key, score=0.25, n=64, completions=64, prompt_tokens=640, completion_tokens=128, traces_path="/t/1.jsonl"
    )
    assert (e1.score, e1.n, e1.prompt_tokens, e1.traces_path) == (0.25, 64, 640, "/t/1.jsonl")
    assert archive.find_evaluation(*key) == e1
    e2 = archive.record_evaluation(*key, score=0.5, n=64, completions=128, prompt_tokens=640, completion_tokens=256)
    assert e2.id == e1.id and e2.score == 0.5 and e2.completions == 128 and e2.traces_path is None
    archive.record_evaluation("r2", h, "base", "val", "val:64@seed0", score=0.1, n=64, completions=64,
                              prompt_tokens=1, completion_tokens=1)  # fmt: skip
    assert len(archive.evaluations("r1")) == 1 and len(archive.evaluations("r2")) == 1
    assert archive.find_evaluation("r1", h, "base", "test", "val:64@seed0") is None
    with pytest.raises(ValueError, match="split"):
        archive.record_evaluation("r1", h, "base", "dev", "x", score=0, n=1, completions=1, prompt_tokens=1,  # type: ignore[arg-type]
                                  completion_tokens=1)  # fmt: skip


def test_legs_and_decisions(archive: Archive) -> None:
    archive.create_run("demo", "whale-adaptive", run_id="r1")
    assert archive.last_leg("r1") is None
    l0 = archive.start_leg("r1", 0, "weights", incumbent_harness_in="h0", checkpoint_in="base")
    assert l0.status == "running" and l0.finished is None and l0.metrics == {}
    done = archive.finish_leg(l0.id, budget_used=512, incumbent_harness_out="h0", checkpoint_out="ck1",
                              metrics={"val": 0.4})  # fmt: skip
    assert (done.status, done.budget_used, done.checkpoint_out, done.metrics) == ("done", 512, "ck1", {"val": 0.4})
    assert done.finished is not None and done.finished >= done.started
    l1 = archive.start_leg("r1", 1, "harness", incumbent_harness_in="h0", checkpoint_in="ck1")
    archive.set_leg_mlflow_run(l1.id, "mlf-1")
    failed = archive.fail_leg(l1.id, "proposer timed out", budget_used=64)
    assert (failed.status, failed.metrics["error"], failed.mlflow_run_id, failed.budget_used) == (
        "failed", "proposer timed out", "mlf-1", 64,
    )  # fmt: skip
    assert [leg.id for leg in archive.legs("r1")] == [l0.id, l1.id]
    assert archive.last_leg("r1") == failed
    assert archive.last_leg("r1", status="done") == done
    with pytest.raises(ValueError, match="leg kind"):
        archive.start_leg("r1", 2, "dance")  # type: ignore[arg-type]
    with pytest.raises(RecordNotFound):
        archive.finish_leg(99_999, budget_used=0)

    d = archive.add_decision("r1", 1, "reject", "gain within noise", {"delta": 0.01, "se": 0.02})
    archive.add_decision("r1", 1, "switch", "plateau")
    ds = archive.decisions("r1")
    assert [x.kind for x in ds] == ["reject", "switch"] and ds[0] == d
    assert d.payload == {"delta": 0.01, "se": 0.02} and ds[1].payload == {}


def test_best_evaluations_one_per_harness(archive: Archive) -> None:
    archive.create_run("demo", "harness-only", run_id="r1")
    seed = _harness(archive, "seed")
    a = _harness(archive, "a", seed)
    b = _harness(archive, "b", seed)
    c = _harness(archive, "c", seed)

    def ev(h: str, subset: str, score: float, n: int, tokens_per_problem: int, ck: str = "base") -> None:
        archive.record_evaluation("r1", h, ck, "val", subset, score=score, n=n, completions=n,
                                  prompt_tokens=tokens_per_problem * n, completion_tokens=n)  # fmt: skip

    ev(seed, "val:64", 0.30, 64, 10)
    ev(a, "val:16", 0.90, 16, 30)  # high on a small subset ...
    ev(a, "val:64", 0.50, 64, 30)  # ... the larger subset is what counts
    ev(b, "val:64", 0.50, 64, 20)
    ev(c, "val:64", 0.20, 64, 40)
    ev(c, "val:64", 0.99, 64, 5, ck="other")  # other checkpoint: same n, later: wins only across checkpoints

    best = archive.best_evaluations("r1", checkpoint_id="base")
    assert list(best) == [seed, a, b, c]
    assert (best[a].score, best[a].n, best[a].subset) == (0.5, 64, "val:64")
    assert best[b].prompt_tokens == 20 * 64 and best[c].score == 0.20
    anywhere = archive.best_evaluations("r1")
    assert (anywhere[c].score, anywhere[c].checkpoint_id) == (0.99, "other")
    assert archive.best_evaluations("r1", checkpoint_id="base", split="test") == {}
    assert seed not in archive.best_evaluations("r1", checkpoint_id="base", exclude=seed)
    later = datetime.now(UTC) + timedelta(days=1)
    assert list(archive.best_evaluations("r1", checkpoint_id="base", as_of=later)) == [seed, a, b, c]
    assert archive.best_evaluations("r1", as_of=datetime(2000, 1, 1, tzinfo=UTC)) == {}


def test_schema_version_mismatch(archive_url: str) -> None:
    with Archive(archive_url) as a:
        assert a.schema_version() == SCHEMA_VERSION
        a.create_run("keep", "whale-fixed", run_id="r1")
    with Archive(archive_url) as a:  # reopening the same version is fine and keeps data
        assert a.get_run("r1").name == "keep"
    eng = create_engine(archive_url)
    with eng.begin() as c:
        c.execute(update(SchemaVersionRow).values(version=SCHEMA_VERSION + 1))
    eng.dispose()
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade WHALE"):
        Archive(archive_url)


def test_default_url_under_whale_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WHALE_DB_URL", raising=False)
    assert default_url() == f"sqlite:///{tmp_path / 'home' / 'whale.db'}"
    with Archive() as a:
        a.create_run("x", "whale-fixed", run_id="r1")
        with a.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    assert (tmp_path / "home" / "whale.db").exists()
    monkeypatch.setenv("WHALE_DB_URL", "sqlite:///elsewhere.db")
    assert default_url() == "sqlite:///elsewhere.db"


_WRITER = """
import sys
from whale_core.records.archive import Archive
a = Archive(sys.argv[1])
for i in range(int(sys.argv[2])):
    a.add_decision("r1", i, "proc", "from subprocess")
    a.update_run("r1", mlflow_run_id=f"proc-{i}")  # read-then-write transactions
    a.put_harness(f"proc-{i}", f"text {i}")
    a.record_evaluation("r1", sys.argv[3], "base", "val", "shared", score=i, n=1, completions=1, prompt_tokens=1,
                        completion_tokens=1)
a.close()
"""


def test_concurrent_writers_sqlite(tmp_path: Path) -> None:
    """Two processes and two threads (each its own Archive/engine) write one SQLite file at once: nothing fails."""
    url = f"sqlite:///{tmp_path / 'whale.db'}"
    n = 40
    with Archive(url) as a:
        a.create_run("c", "whale-fixed", run_id="r1")
        h = _harness(a, "seed")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, url, str(n), h], stderr=subprocess.PIPE, text=True)
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        try:
            with Archive(url) as mine:
                for i in range(n):
                    mine.add_decision("r1", i, tag, "from thread")
                    mine.record_evaluation("r1", h, "base", "val", "shared", score=i, n=1, completions=1,
                                           prompt_tokens=1, completion_tokens=1)  # fmt: skip
                    cand = mine.add_candidate("r1", h, proposer=tag)
                    mine.set_candidate_status(cand.id, "scored")  # read-then-write transactions
                    mine.update_run("r1", mlflow_run_id=f"{tag}-{i}")
                    mine.put_harness(f"shared-{i}", f"text {i}")  # both threads put the same harness
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"t{k}",)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert errors == []
    with Archive(url) as a:
        kinds = [d.kind for d in a.decisions("r1")]
        assert {k: kinds.count(k) for k in set(kinds)} == {"proc": n, "t0": n, "t1": n}
        assert len(a.candidates("r1", status="scored")) == 2 * n
        assert a.get_harness(f"shared-{n - 1}").text == f"text {n - 1}"
        assert len(a.evaluations("r1")) == 1  # every writer upserted the same key


def test_one_archive_shared_by_threads(tmp_path: Path) -> None:
    with Archive(f"sqlite:///{tmp_path / 'whale.db'}") as a:
        a.create_run("c", "whale-fixed", run_id="r1")

        def work(k: int) -> None:
            for i in range(15):
                a.add_decision("r1", i, f"k{k}", "shared engine")

        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(a.decisions("r1")) == 45


def test_memory_sqlite(tmp_path: Path) -> None:
    with Archive("sqlite://") as a:
        a.create_run("mem", "whale-fixed", run_id="r1")
        assert a.get_run("r1").name == "mem"


def test_an_interrupted_attempt_is_kept_marked_and_its_unjudged_candidates_too(archive: Archive) -> None:
    """Resume after a kill: the attempt that was running becomes ``interrupted`` history; its candidates that were
    never judged stop reading ``proposed`` forever; a judged one keeps its status."""
    archive.create_run("demo", "whale-adaptive", run_id="r1")
    h0 = _harness(archive, "seed")
    leg = archive.start_leg("r1", 0, "harness", incumbent_harness_in=h0, checkpoint_in="base")
    judged = archive.add_candidate("r1", _harness(archive, "a", h0), proposer="mutate", leg_id=leg.id,
                                   status="rejected", reason="unsafe template")  # fmt: skip
    open_one = archive.add_candidate("r1", _harness(archive, "b", h0), proposer="mutate", leg_id=leg.id)
    assert open_one.status == "proposed"
    ended = archive.end_attempt(leg.id, "interrupted", "its process ended before the leg finished")
    assert (ended.status, ended.metrics) == ("interrupted", {"error": "its process ended before the leg finished"})
    status = {c.id: (c.status, c.reason) for c in archive.candidates("r1")}
    assert status[judged.id] == ("rejected", "unsafe template")
    assert status[open_one.id][0] == "interrupted" and "interrupted" in status[open_one.id][1]
    assert archive.candidates("r1", status="proposed") == []
    done = archive.start_leg("r1", 0, "harness", incumbent_harness_in=h0, checkpoint_in="base")
    archive.finish_leg(done.id, budget_used=10)
    assert archive.end_attempt(done.id, "superseded", "recomputed by whale rerun").status == "superseded"
    with pytest.raises(ValueError, match="attempt status"):
        archive.end_attempt(done.id, "done", "no")  # type: ignore[arg-type]
    with pytest.raises(RecordNotFound):
        archive.end_attempt(99_999, "interrupted", "gone")


def test_ensure_decision_stores_a_decision_once(archive: Archive) -> None:
    archive.create_run("demo", "whale-adaptive", run_id="r1")
    first = archive.ensure_decision("r1", 1, "switch", "plateau", {"leg": "weights"})
    again = archive.ensure_decision("r1", 1, "switch", "plateau", {"leg": "weights"})
    assert again == first
    other = archive.ensure_decision("r1", 1, "switch", "plateau", {"leg": "harness"})  # another payload: another
    archive.ensure_decision("r1", 2, "switch", "plateau", {"leg": "weights"})  # another iteration
    assert other.id != first.id and len(archive.decisions("r1")) == 3


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("notaurl", "is not a database URL"),
        ("nosuchdialect://x/y", "needs a database driver that is not installed"),
        ("postgresql+psycopg2://nobody@127.0.0.1:1/x", r"cannot open the archive postgresql\+psycopg2://nobody@"),
        # SQLAlchemy 2.1's default PostgreSQL driver is psycopg (3): missing, or installed and refused
        ("postgresql://nobody:secret@127.0.0.1:1/x", r"(driver that is not installed|cannot open the archive)"),
    ],
)
def test_a_bad_archive_url_is_one_archive_error(url: str, match: str) -> None:
    """A malformed URL, an uninstalled driver, a server that does not answer: `ArchiveError` (the CLI prints it as
    ``error: …``, exit 2), one line, never the password."""
    with pytest.raises(ArchiveError, match=match) as info:
        Archive(url)
    assert "\n" not in str(info.value) and "secret" not in str(info.value)


def test_an_archive_in_a_directory_that_cannot_be_created_is_one_archive_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ArchiveError, match="cannot open the archive sqlite:///") as info:
        Archive(f"sqlite:///{blocker / 'home' / 'whale.db'}")
    assert "\n" not in str(info.value)
