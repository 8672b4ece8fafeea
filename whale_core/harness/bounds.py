"""Resource bounds for rendering untrusted harness templates: no template can hang a run or exhaust memory.

The static check (`render.check_template`) already refuses calls, ``*``, ``**``, macros and recursive loops, so a
template that passes it can do much work only through loops (``{% for %}``, at most two deep), filters whose output
grows (``replace`` with a short needle, ``join``, ``list``, ``string`` of nested lists), the ``~``/``+``/``%``
operators, and containers of references (``{% set b = [a, a, a] %}`` ten times over is 3**10 items once printed).
Rendering therefore goes through:

- `BoundedSandbox`, an `ImmutableSandboxedEnvironment` that intercepts the arithmetic operators (`call_binop`:
  ``%`` on a string is refused, ``+`` of strings/lists is size-checked before it is built) and subscripts (a slice
  is charged its copy), wraps every filter (a step plus its input's size; for the filters that build text, the
  result's size estimated before the call and checked after) and checks each printed value in `finalize` before
  it becomes a string;
- `bound_tree`, which rewrites a parsed template so that each ``~`` concatenation, each list/tuple/dict literal and
  each loop's iterable passes through a checking filter (``_whale_concat``, ``_whale_value``, ``_whale_iter``),
  and each operand of a comparison or test is charged its size (``_whale_operand``; ``big == big`` is a memcmp);
- a `Budget` per render (`budget()`): steps (loop iterations, filter and operator calls) up to `MAX_STEPS`, work
  (characters built plus container items walked) up to `MAX_WORK`, and wall time up to `MAX_SECONDS`.

The two counts are deterministic and are what normally stops a template (in well under a second on the 2-core dev
box); the wall-time limit is only a backstop. Exceeding any limit raises `LimitExceeded`, which
`render.render_source` turns into a `RenderError` naming the problem. Simplified: sizes are estimates of
``str(value)`` (``repr`` escapes of non-printable text counted at 10 chars each), erring high, not byte-exact.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer

MAX_RENDER_CHARS = 65536  # the rendered text of one template
MAX_VALUE_CHARS = 1 << 20  # any one value a template builds, as printed
MAX_STEPS = 100_000  # loop iterations + filter and operator calls, per render
MAX_WORK = 16 * MAX_VALUE_CHARS  # characters built + container items walked (weighted), per render
MAX_SECONDS = 5.0  # wall-time backstop per render (the counts stop the known attacks in < 0.5 s on the dev box)
_WALK_WEIGHT = 32  # a container item walked in Python costs about as much as 32 characters copied in C
_CLOCK_EVERY = 256  # steps between two looks at the clock

# Filters that build a new string or list from their input (the rest return a part of it or a number).
_BUILDING_FILTERS = frozenset(
    {"upper", "lower", "trim", "replace", "join", "string", "truncate", "title", "capitalize", "wordcount", "list",
     "reverse", "sum"}
)  # fmt: skip


class LimitExceeded(Exception):
    """A render went over one of the bounds; the message says which (``rendered value exceeds ... chars``)."""


class OutputTooLarge(LimitExceeded):
    """The rendered text (or one printed value) is over `MAX_RENDER_CHARS`: a property of the data as much as of
    the template, so the validation probe does not count it."""


class Budget:
    """What one render may still spend: steps, work and time."""

    __slots__ = ("deadline", "steps", "work")

    def __init__(self) -> None:
        self.steps = 0
        self.work = 0
        self.deadline = time.monotonic() + MAX_SECONDS

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise LimitExceeded(f"too much work: more than {MAX_STEPS} loop iterations and filter/operator calls")
        if self.steps % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise LimitExceeded(f"rendering took longer than {MAX_SECONDS} s")

    def spend(self, work: int) -> None:
        self.work += work
        if self.work > MAX_WORK:
            raise LimitExceeded(f"too much work: more than {MAX_WORK} characters built or read")


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("whale_render_budget", default=None)


@contextlib.contextmanager
def budget() -> Iterator[Budget]:
    """A fresh `Budget` for the renders inside the block (the sandbox charges the innermost one)."""
    b = Budget()
    token = _CURRENT.set(b)
    try:
        yield b
    finally:
        _CURRENT.reset(token)


def _step() -> None:
    b = _CURRENT.get()
    if b is not None:  # None while Jinja folds constants at compile time: sizes are still checked
        b.step()


def _spend(work: int) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.spend(work)


# ------------------------------------------------------------------------------------------------- value sizes


def printed_size(value: Any, limit: int = MAX_VALUE_CHARS) -> int:
    """Estimated ``len(str(value))``, exact for strings; the walk of nested containers stops once past ``limit``
    (so a huge or self-similar structure costs at most ``limit`` steps) and is charged to the budget."""
    if isinstance(value, str):
        return len(value)
    total = 0
    walked = 0
    stack: list[Any] = [value]
    while stack and total <= limit:
        v = stack.pop()
        walked += 1
        if isinstance(v, str):
            total += len(v) + 2 if v.isprintable() else 10 * len(v) + 2
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += 20 if -(10**18) < v < 10**18 else v.bit_length() * 30103 // 100000 + 2
        elif isinstance(v, float):
            total += 24
        elif isinstance(v, Mapping):
            total += 2 + 4 * len(v)
            stack.extend(itertools.chain.from_iterable(v.items()))
        elif isinstance(v, list | tuple | set | frozenset):
            total += 2 + 2 * len(v)
            stack.extend(v)
        elif isinstance(v, bytes | bytearray):
            total += 4 * len(v) + 3
        else:  # generators, loop objects, undefined values: never stringified here
            total += 64
    _spend(walked * _WALK_WEIGHT)
    return total


def ensure(size: int, what: str = "value") -> None:
    """Raise `LimitExceeded` when a value of ``size`` printed chars would be too large to build."""
    if size > MAX_VALUE_CHARS:
        raise LimitExceeded(f"a {what} would exceed {MAX_VALUE_CHARS} chars")


def _built(value: Any, what: str) -> Any:
    size = printed_size(value)
    ensure(size, what)
    _spend(size)
    return value


# --------------------------------------------------------------------------------- size estimates of filters


def _est_replace(s: Any, old: Any = "", new: Any = "", count: Any = None) -> int:
    s, old, new = str(s), str(old), str(new)  # each already size-checked
    n = len(s) + 1 if not old else s.count(old)
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * (len(new) - len(old))


def _est_join(value: Any, d: Any = "", attribute: Any = None) -> int:
    if isinstance(value, str):
        n, size = len(value), len(value)
    elif isinstance(value, Mapping | list | tuple | set | frozenset):
        n, size = len(value), printed_size(value)
    else:
        return 0  # an iterator: the result is checked after the call
    return size + max(0, n - 1) * printed_size(d)


def _est_list(value: Any, *_: Any) -> int:
    return 5 * len(value) + 2 if isinstance(value, str) else printed_size(value)


def _est_sum(iterable: Any, attribute: Any = None, start: Any = 0) -> int:
    return printed_size(iterable) + printed_size(start)


_ESTIMATES: dict[str, Callable[..., int]] = {
    "replace": _est_replace,
    "join": _est_join,
    "list": _est_list,
    "sum": _est_sum,
}


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` with a step charged per call and, for building filters, sizes checked before and after."""
    skip = 0 if _PassArg.from_obj(func) is None else 1  # the context/eval-context/environment argument
    building = name in _BUILDING_FILTERS
    estimate = _ESTIMATES.get(name)

    @functools.wraps(func)  # keeps jinja_pass_arg, so Jinja passes the same leading argument
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _step()
        if len(args) > skip:
            _spend(printed_size(args[skip]))  # every filter reads its input at least once
        if not building:
            return func(*args, **kwargs)
        for v in (*args[skip:], *kwargs.values()):
            ensure(printed_size(v), f"'{name}' argument")
        if estimate is not None:
            ensure(estimate(*args[skip:], **kwargs), f"'{name}' result")
        return _built(func(*args, **kwargs), f"'{name}' result")

    return bounded


# ------------------------------------------------------------------------------------ filters the rewrite adds


def _whale_concat(first: Any, *rest: Any) -> str:
    """``a ~ b ~ c``: sizes checked before the string is built."""
    _step()
    parts = (first, *rest)
    ensure(sum(printed_size(p) for p in parts), "'~' result")
    return str(_built("".join(str(p) for p in parts), "'~' result"))


def _whale_value(value: Any) -> Any:
    """A list/tuple/dict literal: its printed size (references counted as often as they appear) is checked."""
    _step()
    return _built(value, "list/dict literal")


def _whale_operand(value: Any) -> Any:
    """An operand of a comparison or a test (``a == b``, ``x in s``, ``n is divisibleby 3``): charged its size."""
    _spend(max(1, printed_size(value)))
    return value


def _whale_iter(value: Any) -> Iterator[Any]:
    """A loop's iterable: one step per iteration."""
    for item in value:
        _step()
        yield item


_REWRITE_FILTERS: dict[str, Callable[..., Any]] = {
    "_whale_concat": _whale_concat,
    "_whale_value": _whale_value,
    "_whale_iter": _whale_iter,
    "_whale_operand": _whale_operand,
}


class _Rewrite(NodeTransformer):
    def _wrap(self, node: Any, name: str, args: list[nodes.Expr] | None = None) -> nodes.Filter:
        return nodes.Filter(node, name, args or [], [], None, None, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        out: Any = self.generic_visit(node)
        out.iter = self._wrap(out.iter, "_whale_iter")
        return out  # type: ignore[no-any-return]

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        out: Any = self.generic_visit(node)
        first, *rest = out.nodes
        return self._wrap(first, "_whale_concat", rest)

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        out: Any = self.generic_visit(node)
        out.expr = self._wrap(out.expr, "_whale_operand")
        for operand in out.ops:
            operand.expr = self._wrap(operand.expr, "_whale_operand")
        return out  # type: ignore[no-any-return]

    def visit_Test(self, node: nodes.Test) -> nodes.Node:
        out: Any = self.generic_visit(node)
        out.node = self._wrap(out.node, "_whale_operand")
        out.args = [self._wrap(a, "_whale_operand") for a in out.args]
        return out  # type: ignore[no-any-return]

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        out: Any = self.generic_visit(node)
        if getattr(out, "ctx", "load") != "load":  # a tuple target: {% for a, b in ... %}
            return out  # type: ignore[no-any-return]
        return self._wrap(out, "_whale_value")

    visit_List = visit_Tuple = visit_Dict = _literal


def bound_tree(tree: nodes.Template, env: ImmutableSandboxedEnvironment) -> nodes.Template:
    """Rewrite a checked template so its concatenations, literals and loops go through the checking filters."""
    out = _Rewrite().visit(tree)
    out.set_environment(env)
    return out  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------------------- the sandbox


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with every operator intercepted and every printed value size-checked."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def getitem(self, obj: Any, argument: Any) -> Any:
        """``x[i]`` costs a step; a slice ``x[a:b]`` is charged the size of the copy it makes."""
        _step()
        out = super().getitem(obj, argument)
        if isinstance(argument, slice):
            _spend(printed_size(out))
        return out

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step()
        seqs = (str, list, tuple)
        if operator == "%" and isinstance(left, str):
            raise LimitExceeded("string formatting with % is not allowed")
        if operator == "+" and isinstance(left, seqs) and isinstance(right, seqs):
            ensure(printed_size(left) + printed_size(right), "'+' result")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, seqs) and isinstance(n, int):
                    ensure(printed_size(seq) * max(0, n), "'*' result")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            ensure(left.bit_length() * max(0, right) * 30103 // 100000, "'**' result")
        out = super().call_binop(context, operator, left, right)
        return _built(out, f"{operator!r} result") if isinstance(out, seqs) else out


def finalize(value: Any) -> Any:
    """Checks each value printed with ``{{ }}`` before Jinja turns it into text."""
    if printed_size(value, MAX_RENDER_CHARS) > MAX_RENDER_CHARS:
        raise OutputTooLarge(f"rendered text exceeds {MAX_RENDER_CHARS} chars")
    return value


def install(env: BoundedSandbox, allowed_filters: frozenset[str]) -> None:
    """Keep only the allowed filters, each wrapped; add the rewrite's filters; set `finalize`."""
    env.filters = {k: _bounded_filter(k, v) for k, v in env.filters.items() if k in allowed_filters}
    env.filters.update(_REWRITE_FILTERS)
    env.finalize = finalize
