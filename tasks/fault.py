"""A test hook that kills the process at a named point of a task: how the fault-matrix tests crash a run precisely.

``WHALE_FAULT=<point>[:<n>][@<signal>]`` makes the process signal itself the ``n``-th time (default 1) it reaches
``point``. ``KILL`` (the default): SIGKILL to its whole process group when it leads one (a ``whale`` command started
in its own session, as with ``kill -9 -PGID``), else to itself alone (its temporary Prefect server, in a session of
its own, dies with it: ``flows/prefect_server.py``). ``TERM``: SIGTERM to itself, as ``kill PID`` does. ``INT``:
SIGINT to its process group, as a terminal's Ctrl-C does. ``FULL``: no signal; the disk fills for real — a file
``.whale-fault-full`` grows in the directory ``WHALE_FAULT_FILL`` names until the file system says ENOSPC — and the
run goes on to its next write there (a test mounts a small tmpfs for the one store it fills: checkpoints, traces, the
archive, MLflow). Unset — always, outside tests — every call here is a dictionary lookup.

The points sit where a crash loses work: at the end of a task's body, after its work and before it returns (so
Prefect has not stored the result), or inside a GRPO update:

- ``rollout``, ``rollout-test`` (a rollout on the test split: the run's final evaluation), ``score-harness``,
  ``propose-harness``, ``plateau-check``, ``grpo-update``: the task's work is done (the update's final checkpoint
  saved), its result not yet returned;
- ``grpo-update-before-checkpoint``: the end of the first training step of a process, before any TRL checkpoint;
- ``grpo-update-after-checkpoint``: right after a TRL checkpoint was saved (the update resumes from it).

A task that comes back ``Cached`` runs no body and reaches no point, so a resumed run armed with a later point runs
on to it. Simplified: one point per process (a test arms the next one on the resume).

``WHALE_FAULT_JOURNAL=<file>``: each task that got to the end of its body appends its point and cache key there.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

ENV = "WHALE_FAULT"
JOURNAL = "WHALE_FAULT_JOURNAL"
POINTS = frozenset(
    {
        "rollout",
        "grpo-update",
        "rollout-test",
        "score-harness",
        "propose-harness",
        "plateau-check",
        "grpo-update-before-checkpoint",
        "grpo-update-after-checkpoint",
    }
)

_lock = threading.Lock()
_reached: dict[str, int] = {}


SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}
ACTIONS = frozenset({*SIGNALS, "FULL"})
FILL = "WHALE_FAULT_FILL"
BALLOON = ".whale-fault-full"


def armed() -> tuple[str, int, str] | None:
    """The point, occurrence and signal ``WHALE_FAULT`` names, or None. A name that is not a point or a signal raises
    ValueError."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    where, _, sig = spec.partition("@")
    name, _, count = where.partition(":")
    if name not in POINTS or (count and not count.isdigit()) or (sig or "KILL") not in ACTIONS:
        raise ValueError(
            f"{ENV}={spec!r}: expected <point>[:<n>][@<action>] with a point among {sorted(POINTS)} and an action "
            f"among {sorted(ACTIONS)}"
        )
    return name, int(count or 1), sig or "KILL"


def point(name: str) -> None:
    """Reached ``name``: signal this process (group), or fill the disk, if ``WHALE_FAULT`` arms it for this
    occurrence; else, at the end of a task's body, note the task's work as done in ``WHALE_FAULT_JOURNAL`` (when
    set)."""
    target = armed()
    if target is not None and target[0] == name:
        with _lock:
            _reached[name] = _reached.get(name, 0) + 1
            hit = _reached[name] == target[1]
        if hit:
            _signal(target[2])
    if os.environ.get(JOURNAL) and not name.startswith("grpo-update-"):
        _journal(name)


def _signal(sig: str) -> None:
    """Send ``sig`` (a `SIGNALS` name) as described in the module docstring."""
    leader = os.getpgrp() == os.getpid()
    if sig == "FULL":
        _fill(os.environ[FILL])
    elif sig == "TERM":
        os.kill(os.getpid(), signal.SIGTERM)
    elif sig == "INT":
        os.killpg(os.getpgrp(), signal.SIGINT) if leader else os.kill(os.getpid(), signal.SIGINT)
    else:
        if leader:
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _fill(directory: str) -> None:
    """Grow ``directory/.whale-fault-full`` until its file system is full (ENOSPC), down to the last 4 KiB."""
    chunk = 1 << 20
    with open(os.path.join(directory, BALLOON), "ab", buffering=0) as f:
        while chunk >= 4096:
            try:
                f.write(b"\0" * chunk)
            except OSError:
                chunk //= 2


def _journal(name: str) -> None:
    """Append ``<point> <cache key>`` of the running task: a test reads it to check that no completed piece of work
    (one cache key) was computed twice across a run's kills and resumes (Prefect's own records hold no cache key)."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    key_fn = ctx.task.cache_key_fn if ctx is not None else None
    key = key_fn(ctx, ctx.parameters or {}) if ctx is not None and key_fn is not None else "?"
    with _lock, open(os.environ[JOURNAL], "a", encoding="utf-8") as f:
        f.write(f"{name} {key}\n")


def trainer_callbacks() -> list[Any]:
    """The GRPO update's points as a ``transformers`` callback (empty unless a GRPO point is armed)."""
    target = armed()
    if target is None or not target[0].startswith("grpo-update-"):
        return []
    from transformers import TrainerCallback

    class _Fault(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            point("grpo-update-before-checkpoint")

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            point("grpo-update-after-checkpoint")

    return [_Fault()]
