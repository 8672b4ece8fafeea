"""Sandboxed Jinja2 rendering of harness templates, the static template check, and few-shot demo selection.

Templates are untrusted data (a proposer may be an LLM), so they pass two gates:

1. `check_template` (at validation time) parses the template and walks the Jinja AST with an allowlist of node
   types: output, names, constants, ``{% if %}``, ``{% for %}`` (nested at most `MAX_LOOP_DEPTH` deep),
   ``{% set x = ... %}``, comparisons, arithmetic except ``*`` and ``**`` (they build huge values),
   ``~`` concatenation, subscripts, slices, list/tuple/dict literals, and allowlisted filters/tests. It rejects
   attribute or item access to names starting with ``_`` (``{{ ''.__class__ }}``), every call (``{{ x.upper() }}``,
   ``{{ cycler.__init__.__globals__ }}``), ``import``/``include``/``extends``/``macro``/``block``/``call``,
   set-blocks, filter-blocks, ``with`` and autoescape blocks.
2. Rendering uses `bounds.BoundedSandbox` (an `ImmutableSandboxedEnvironment`) with `StrictUndefined`, autoescape
   off, no globals (no ``range``, ``cycler``, ``lipsum``, ``namespace``), and only the allowlisted filters and tests
   installed, so a check that missed something still meets the sandbox. Every render runs under the bounds of
   `bounds` (steps, work, value sizes, wall time; intermediate values included), and the output is capped at
   `MAX_RENDER_CHARS`.

`check_template` also refuses what is wasteful on its face (``replace`` with a literal empty search string, a loop
whose body prints nothing), compiles the template, and renders it once on a probe context (every variable bound to
`PROBE_TEXT`): a template that goes over the bounds on a 110-char field is refused at validation, so an LLM's
candidate that would hang ends as a recorded rejection, not as a slow scoring leg.

The template sees the problem's fields plus ``instruction`` (the harness's instruction wins over a problem field of
that name). Demo selection is seeded by ``(seed, problem.id)`` with `random.Random` on a string seed, which is
stable across processes and Python hash seeds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import StrictUndefined, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from whale_core import seeds
from whale_core.harness import bounds
from whale_core.harness.bounds import MAX_RENDER_CHARS, BoundedSandbox, LimitExceeded, OutputTooLarge
from whale_core.harness.errors import HarnessError, RenderError
from whale_core.suites.base import Problem

ALLOWED_FILTERS = frozenset(
    {
        "upper", "lower", "trim", "replace", "join", "length", "count", "default", "d", "string", "int", "float",
        "first", "last", "reverse", "truncate", "title", "capitalize", "wordcount", "list", "abs", "round", "min",
        "max", "sum",
    }
)  # fmt: skip
ALLOWED_TESTS = frozenset(
    {
        "defined", "undefined", "none", "number", "string", "integer", "float", "boolean", "true", "false", "even",
        "odd", "divisibleby", "eq", "ne", "lt", "le", "gt", "ge", "in", "sequence", "mapping", "lower", "upper",
    }
)  # fmt: skip
MAX_LOOP_DEPTH = 2
__all__ = ["MAX_RENDER_CHARS", "check_template", "render_source", "sandbox", "select_demos"]

_ALLOWED_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.If, nodes.For, nodes.Assign,
    nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Filter, nodes.Test, nodes.CondExpr, nodes.Compare,
    nodes.Operand, nodes.Concat, nodes.And, nodes.Or, nodes.Not, nodes.Neg, nodes.Pos, nodes.Add, nodes.Sub,
    nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.Keyword,
)  # fmt: skip
_NODE_WORDS: dict[type[nodes.Node], str] = {
    nodes.Call: "function or method calls",
    nodes.Macro: "macros",
    nodes.CallBlock: "call blocks",
    nodes.Import: "import",
    nodes.FromImport: "import",
    nodes.Include: "include",
    nodes.Extends: "extends",
    nodes.Block: "blocks",
    nodes.AssignBlock: "set-blocks ({% set x %}...{% endset %}; use {% set x = ... %})",
    nodes.FilterBlock: "filter blocks",
    nodes.With: "with blocks",
    nodes.Mul: "the * operator",
    nodes.Pow: "the ** operator",
}


@functools.lru_cache(maxsize=1)
def sandbox() -> ImmutableSandboxedEnvironment:
    """The one rendering environment: the bounded immutable sandbox (`bounds`), strict undefined, no globals,
    allowlisted filters (each wrapped with size checks) and tests."""
    env = BoundedSandbox(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, auto_reload=False, cache_size=0
    )
    env.globals.clear()
    bounds.install(env, ALLOWED_FILTERS)
    env.tests = {k: v for k, v in env.tests.items() if k in ALLOWED_TESTS}
    return env


def check_template(source: str, field: str) -> None:
    """Raise `HarnessError` (with ``field``) if ``source`` is not a template that this sandbox accepts: it must
    parse, pass the AST allowlist (`_walk`), compile, and render a probe context (every variable bound to
    `PROBE_TEXT`) within the step, work, value-size and time bounds of `bounds` (the probe's other errors, such as
    a missing attribute or too long an output, depend on the real data and are ignored)."""
    try:
        tree = sandbox().parse(source)
    except jinja2.TemplateSyntaxError as e:
        raise HarnessError(field, f"template syntax error on line {e.lineno}: {e.message}") from None
    except RecursionError:
        raise HarnessError(field, "template nests too deeply") from None
    problem = _walk(tree, loop_depth=0)
    if problem:
        raise HarnessError(field, f"unsafe template: {problem}")
    try:
        _compiled(source)
    except Exception as e:  # RecursionError, SyntaxError from Python's compile(), TemplateAssertionError, ...
        raise HarnessError(field, f"template does not compile: {type(e).__name__}: {e}") from None
    probe = dict.fromkeys(jinja2.meta.find_undeclared_variables(tree), PROBE_TEXT)
    try:
        _render(source, probe)
    except OutputTooLarge:  # the real fields may well be shorter; render_source enforces the cap
        pass
    except LimitExceeded as e:
        probe_note = f"(with every variable = a {len(PROBE_TEXT)}-char text)"
        raise HarnessError(field, f"template too costly: {e} {probe_note}") from None
    except Exception:  # a probe value of the wrong type is expected: only the bounds matter here
        pass


PROBE_TEXT = "12 + 345 = ? abc XYZ.\n" * 5


def _walk(node: nodes.Node, loop_depth: int) -> str | None:
    for kind, word in _NODE_WORDS.items():
        if isinstance(node, kind):
            return f"{word} are not allowed" if word.endswith("s") else f"{word} is not allowed"
    if not isinstance(node, _ALLOWED_NODES):
        return f"'{type(node).__name__}' is not allowed"
    if isinstance(node, nodes.Name) and node.name.startswith("_"):
        return f"names starting with '_' are not allowed ({node.name!r})"
    if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
        return f"attributes starting with '_' are not allowed ({node.attr!r})"
    if isinstance(node, nodes.Const) and isinstance(node.value, str) and node.value.startswith("_"):
        return f"string constants starting with '_' are not allowed ({node.value[:20]!r})"
    if isinstance(node, nodes.Filter) and node.name not in ALLOWED_FILTERS:
        return f"filter {node.name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_FILTERS))})"
    if isinstance(node, nodes.Test) and node.name not in ALLOWED_TESTS:
        return f"test {node.name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_TESTS))})"
    if isinstance(node, nodes.Keyword) and node.key == "attribute":
        return "the 'attribute' argument is not allowed"
    if isinstance(node, nodes.Mod) and isinstance(node.left, nodes.Const) and isinstance(node.left.value, str):
        return "string formatting with % is not allowed"
    if isinstance(node, nodes.Filter) and node.name == "replace":
        old = node.args[0] if node.args else next((k.value for k in node.kwargs if k.key == "old"), None)
        if isinstance(old, nodes.Const) and old.value == "":
            return "replace with an empty search string is not allowed (it inserts between every character)"
    if isinstance(node, nodes.For):
        if node.recursive:
            return "recursive loops are not allowed"
        loop_depth += 1
        if loop_depth > MAX_LOOP_DEPTH:
            return f"loops nested deeper than {MAX_LOOP_DEPTH} are not allowed"
        if not any(isinstance(n, nodes.Output) or n.find(nodes.Output) is not None for n in node.body):
            return "a loop whose body prints nothing is not allowed (it can only waste time)"
    for child in node.iter_child_nodes():
        problem = _walk(child, loop_depth)
        if problem:
            return problem
    return None


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> jinja2.Template:
    env = sandbox()
    return env.from_string(bounds.bound_tree(env.parse(source), env))


def _render(source: str, context: Mapping[str, Any]) -> str:
    """Render under a fresh `bounds.budget`; raises `LimitExceeded` past a bound, else whatever the template does."""
    chunks: list[str] = []
    size = 0
    with bounds.budget():
        for chunk in _compiled(source).generate(dict(context)):
            size += len(chunk)
            if size > MAX_RENDER_CHARS:
                raise OutputTooLarge(f"rendered text exceeds {MAX_RENDER_CHARS} chars")
            chunks.append(chunk)
    return "".join(chunks)


def render_source(source: str, context: Mapping[str, Any], field: str, problem_id: str) -> str:
    """Render a checked template over ``context``, within the bounds of `bounds` (time, steps, sizes); raise
    `RenderError` naming the problem and the cause."""
    try:
        return _render(source, context)
    except LimitExceeded as e:
        raise RenderError(field, f"problem {problem_id!r}: {e}") from None
    except jinja2.UndefinedError as e:
        names = ", ".join(sorted(k for k in context if k != "instruction"))
        raise RenderError(field, f"problem {problem_id!r}: {e.message} (problem fields: {names})") from None
    except Exception as e:  # the sandbox, a bad filter argument, a division by zero: all per-problem failures
        raise RenderError(field, f"problem {problem_id!r}: {type(e).__name__}: {e}") from None


def context_for(problem: Problem, instruction: str) -> dict[str, Any]:
    """What a template sees: the problem's fields plus ``instruction``."""
    return {**problem.fields, "instruction": instruction}


_DIGIT, _LETTER = re.compile(r"[0-9]"), re.compile(r"[A-Za-z]")


@functools.lru_cache(maxsize=65536)
def _shape(fields: tuple[tuple[str, str], ...]) -> str:
    """A problem's surface shape: its field values with digits as ``9`` and letters as ``a`` (``'123+45'`` and
    ``'907+12'`` share a shape)."""
    return "|".join(_LETTER.sub("a", _DIGIT.sub("9", v)) for _, v in fields)


def _shape_of(p: Problem) -> str:
    return _shape(tuple(sorted((str(k), str(v)) for k, v in p.fields.items())))


def _similar(problem: Problem, pool: Sequence[Problem], k: int, seed: int) -> list[Problem]:
    """``select: similar``: the ``k`` pool problems closest in surface shape (same shape first, then the nearest
    total length), ties broken by a seeded shuffle. Generic kNN demo selection on the problem fields only."""
    want = _shape_of(problem)
    rng = seeds.rng("whale-demos", seed, problem.id)
    order = list(range(len(pool)))
    rng.shuffle(order)
    ranked = sorted(
        (i for i in order if pool[i].id != problem.id),
        key=lambda i: (_shape_of(pool[i]) != want, abs(len(_shape_of(pool[i])) - len(want))),
    )
    return [pool[i] for i in ranked[:k]]


def select_demos(problem: Problem, pool: Sequence[Problem], k: int, select: str, seed: int) -> list[Problem]:
    """Up to ``k`` demos from ``pool``, never ``problem`` itself (compared by id); deterministic in (seed, id).
    ``select``: ``random`` (seeded), ``first`` (the pool's first k) or ``similar`` (closest surface shape)."""
    if k <= 0 or not pool:
        return []
    if select == "similar":
        return _similar(problem, pool, k, seed)
    if select == "first":
        out: list[Problem] = []
        for p in pool:
            if p.id != problem.id:
                out.append(p)
                if len(out) == k:
                    break
        return out
    rng = seeds.rng("whale-demos", seed, problem.id)
    picked = rng.sample(range(len(pool)), min(len(pool), k + 1))
    out = [pool[i] for i in picked if pool[i].id != problem.id][:k]
    if len(out) < k and len(out) < len(pool) - 1:  # several pool items share the problem's id: filter first
        others = [p for p in pool if p.id != problem.id]
        out = [others[i] for i in rng.sample(range(len(others)), min(len(others), k))]
    return out


def render_text_prompt(
    template: str,
    instruction: str,
    separator: str,
    problem: Problem,
    demos: Sequence[Problem],
    encode: Callable[[str], str],
) -> str:
    """Each demo rendered + its encoded answer, joined by ``separator``, then the separator, then the problem."""
    parts = [render_source(template, context_for(d, instruction), "template", d.id) + encode(d.answer) for d in demos]
    parts.append(render_source(template, context_for(problem, instruction), "template", problem.id))
    return separator.join(parts)
