"""The archive's read-only mode: every method that writes is marked, and a read-only view changes nothing."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from whale_core.records.archive import Archive, ArchiveError
from whale_core.records.archive.readonly import SKIPPED, is_write
from whale_core.records.archive.tables import Base

TEXT = "whale_harness: 1\nname: h\n"
SHA = "a" * 64

# One call per write method, as a replayed leg would make it (all on records that exist).
CALLS: dict[str, Callable[[Archive, dict[str, Any]], Any]] = {
    "create_run": lambda a, ids: a.create_run("other", "harness-only", run_id="r2"),
    "update_run": lambda a, ids: a.update_run("r1", status="finished", mlflow_run_id="m"),
    "put_harness": lambda a, ids: a.put_harness("b" * 64, "whale_harness: 1\nname: b\n", "b"),
    "add_candidate": lambda a, ids: a.add_candidate("r1", SHA, proposer="mutate", leg_id=ids["leg"]),
    "set_candidate_status": lambda a, ids: a.set_candidate_status(ids["candidate"], "lost", "eliminated"),
    "put_checkpoint": lambda a, ids: a.put_checkpoint("ck1", "r1", "/p", SHA, mlflow_model_id="model-1"),
    "record_evaluation": lambda a, ids: a.record_evaluation(
        "r1", SHA, "base", "val", "first4@seed0", score=0.9, n=4, completions=4, prompt_tokens=1, completion_tokens=1
    ),
    "start_leg": lambda a, ids: a.start_leg("r1", 1, "harness"),
    "finish_leg": lambda a, ids: a.finish_leg(ids["leg"], budget_used=3, metrics={"x": 1.0}),
    "fail_leg": lambda a, ids: a.fail_leg(ids["leg"], "boom"),
    "end_attempt": lambda a, ids: a.end_attempt(ids["leg"], "interrupted", "died"),
    "set_leg_mlflow_run": lambda a, ids: a.set_leg_mlflow_run(ids["leg"], "child"),
    "add_decision": lambda a, ids: a.add_decision("r1", 0, "switch", "plateau"),
    "ensure_decision": lambda a, ids: a.ensure_decision("r1", 0, "stop", "budget spent"),
}


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    with Archive(f"sqlite:///{tmp_path / 'whale.db'}") as a:
        yield a


def _seeded(a: Archive) -> dict[str, Any]:
    a.create_run("demo", "harness-only", run_id="r1")
    a.put_harness(SHA, TEXT, "h")
    leg = a.start_leg("r1", 0, "harness")
    cand = a.add_candidate("r1", SHA, proposer="mutate", leg_id=leg.id)
    a.put_checkpoint("ck1", "r1", "/p", SHA)
    a.record_evaluation("r1", SHA, "base", "val", "first4@seed0", score=0.5, n=4, completions=4, prompt_tokens=1,
                        completion_tokens=1)  # fmt: skip
    return {"leg": leg.id, "candidate": cand.id}


def _dump(a: Archive) -> dict[str, list[tuple[Any, ...]]]:
    with a.engine.connect() as c:
        return {t.name: [tuple(r) for r in c.execute(select(t))] for t in Base.metadata.sorted_tables}


def _public_methods() -> dict[str, Any]:
    return {n: f for n, f in inspect.getmembers(Archive, inspect.isfunction) if not n.startswith("_")}


def test_every_method_that_writes_is_marked() -> None:
    """A public method whose body opens a write transaction (or ends a leg) must be marked `writes`: then a
    read-only view skips it. Checked on the source, so a new write method cannot be forgotten."""
    unmarked = []
    for name, fn in _public_methods().items():
        src = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
        calls = {
            node.func.attr
            for node in ast.walk(ast.parse(src))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        }
        if calls & ({"_write", "_end_leg"} | {n for n, f in _public_methods().items() if is_write(f)}) and not is_write(
            fn
        ):
            unmarked.append(name)
    assert unmarked == []
    assert {n for n, f in _public_methods().items() if is_write(f)} == set(CALLS)


def test_read_only_view_leaves_the_store_unchanged(archive: Archive) -> None:
    ids = _seeded(archive)
    before = _dump(archive)
    view = archive.read_only_view()
    for name, call in CALLS.items():
        assert call(view, ids) is SKIPPED, name
    assert _dump(archive) == before
    assert SKIPPED.id == -1 and SKIPPED.status is None
    # reads pass through; the view shares the engine, and closing it closes nothing
    assert view.get_run("r1").status == "running" and [e.score for e in view.evaluations("r1")] == [0.5]
    view.close()
    assert archive.get_run("r1").name == "demo"
    # the same calls on the archive itself do write
    for name, call in CALLS.items():
        assert call(archive, ids) is not SKIPPED, name
    assert _dump(archive) != before


def test_an_unmarked_write_on_a_read_only_view_raises(archive: Archive) -> None:
    view = archive.read_only_view()
    with pytest.raises(ArchiveError, match="not marked @writes"), view._write():
        pass
