"""Content cache keys: deterministic, sensitive to what determines a result, loud when they cannot be computed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tasks.cache import KEY_FAILURES, CacheKeyError, content_cache_key, content_key
from whale_core.legs.schedule import LegOutcome
from whale_core.records.refs import HarnessRef, PolicyRef


def _inputs(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "policy": PolicyRef("tiny", None, "base-abc"),
        "harness": HarnessRef("f" * 64, "whale_harness: 1\n"),
        "suite": {"name": "arith", "seed": 0},
        "seed": 0,
        "history": [LegOutcome(0, "weights", 0.5)],
    }
    base.update(changes)
    return base


def test_key_is_deterministic_and_order_free() -> None:
    a = content_key("t", "src", _inputs())
    b = content_key("t", "src", dict(reversed(list(_inputs().items()))))
    assert a == b and len(a) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"policy": PolicyRef("tiny", None, "base-abd")},
        {"harness": HarnessRef("e" * 64, "whale_harness: 1\n")},
        {"suite": {"name": "arith", "seed": 1}},
        {"seed": 1},
        {"history": [LegOutcome(0, "weights", 0.6)]},
    ],
)
def test_key_changes_with_content(change: dict[str, object]) -> None:
    assert content_key("t", "src", _inputs()) != content_key("t", "src", _inputs(**change))


def test_key_changes_with_task_source() -> None:
    assert content_key("t", "def f(): 1", _inputs()) != content_key("t", "def f(): 2", _inputs())


def test_unhashable_input_raises_and_is_recorded() -> None:
    class Model:
        """Stands in for a torch module travelling by mistake."""

    with pytest.raises(CacheKeyError, match="policy"):
        content_key("t", "src", _inputs(policy=Model()))

    @dataclass
    class Ctx:
        task: object

    class FakeTask:
        name = "rollout"

        @staticmethod
        def fn() -> None:
            return None

    key_fn = content_cache_key("out_dir")
    assert len(key_fn(Ctx(FakeTask()), {"out_dir": Path("/x"), "seed": 1})) == 64
    with pytest.raises(CacheKeyError):
        key_fn(Ctx(FakeTask()), {"seed": Model()})
    assert KEY_FAILURES and "rollout" in KEY_FAILURES[0]
    KEY_FAILURES.clear()


def test_excluded_inputs_do_not_change_the_key() -> None:
    @dataclass
    class Ctx:
        task: object

    class FakeTask:
        name = "grpo-update"

        @staticmethod
        def fn() -> None:
            return None

    key_fn = content_cache_key("out_dir")
    assert key_fn(Ctx(FakeTask()), {"out_dir": "/a", "seed": 1}) == key_fn(
        Ctx(FakeTask()), {"out_dir": "/b", "seed": 1}
    )
