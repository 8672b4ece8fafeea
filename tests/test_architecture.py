"""The shape of `whale_core`: its modules import each other without a circle, and never the layers above it.

Every module under ``whale_core/`` is parsed with `ast` (nothing is imported) and every import statement counts:
module level, inside functions (lazy imports), and under ``if TYPE_CHECKING:``. Type-only imports count on purpose:
a circle that exists only for the type checker still ties two modules together (neither can be read, moved or
tested without the other), and breaking it is cheap (move the shared type down, as `whale_core.models.handle` does).

The graph's nodes are modules (a package is its ``__init__``). ``from whale_core.x import y`` is an edge to the
submodule ``whale_core.x.y`` when that module exists, else to ``whale_core.x``; ``import whale_core.x.y`` is an edge to
``whale_core.x.y``. Importing a submodule also runs its package's ``__init__``; that implicit edge is not counted (a
package's ``__init__`` re-exporting its own modules would otherwise always be a circle).

The checks take the package root as a parameter (`import_graph`), so they can be run against another checkout.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "whale_core"
# Layers above the library: orchestration (Prefect), its tasks, the command line.
FORBIDDEN = ("flows", "tasks", "whale_cli")


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package directory ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_names(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module name an import statement of ``module`` names (absolute; any depth in the file)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                names.add(sub if sub in modules else target)
    return names


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``whale_core.x.Thing`` -> ``whale_core.x``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges among the package's modules, the names outside the package each module imports)."""
    modules = module_names(root)
    edges: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges[module] = set()
        external[module] = set()
        for name in imported_names(module, path, modules):
            if name == root.name or name.startswith(root.name + "."):
                target = resolve(name, modules)
                if target is not None and target != module:
                    edges[module].add(target)
            else:
                external[module].add(name)
    return edges, external


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (``[a, b, ..., a]``), or None. Depth-first search, deterministic order."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check_package(root: Path) -> list[str]:
    """Every architecture problem of the package at ``root`` (empty: none)."""
    edges, external = import_graph(root)
    problems = []
    cycle = find_cycle(edges)
    if cycle:
        problems.append("import circle: " + " -> ".join(cycle))
    for module, names in sorted(external.items()):
        upward = sorted(n for n in names if n.split(".")[0] in FORBIDDEN)
        if upward:
            problems.append(f"{module} imports {', '.join(upward)} (the library must not import flows/tasks/CLI)")
    return problems


def test_whale_core_has_no_import_circle_and_imports_no_upper_layer() -> None:
    problems = check_package(REPO / PACKAGE)
    assert not problems, "\n".join(problems)


def test_the_checker_sees_circles_lazy_type_only_and_upward_imports(tmp_path: Path) -> None:
    """The checks catch what they claim to: a circle through a lazy and a TYPE_CHECKING import (relative and
    ``from package import submodule`` forms), and a lazy import of a layer above."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from whale_core.sub.b import B\n")  # own package: not a circle
    (pkg / "a.py").write_text("def f():\n    from whale_core.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\nclass B: ...\n"
    )
    (pkg / "sub" / "c.py").write_text("import whale_core.a\nclass C: ...\n")
    assert check_package(pkg) == [
        "import circle: whale_core.a -> whale_core.sub.b -> whale_core.sub.c -> whale_core.a"
    ]
    (pkg / "sub" / "c.py").write_text("def g():\n    import flows.iteration\nclass C: ...\n")
    assert check_package(pkg) == [
        "whale_core.sub.c imports flows.iteration (the library must not import flows/tasks/CLI)"
    ]


# ------------------------------------------------------------------------------------------------ the engine
LAYERS = ("whale_core", "flows", "tasks", "whale_cli")
ENGINE = REPO / "whale_core" / "ascent" / "engine.py"
ARCHIVE_WRITES = frozenset(
    {
        "put_harness", "add_candidate", "set_candidate_status", "record_evaluation", "start_leg", "finish_leg",
        "fail_leg", "end_attempt", "add_decision", "ensure_decision", "update_run", "create_run", "put_checkpoint",
        "set_leg_mlflow_run",
    }
)  # fmt: skip
LINEAGE_WRITES = frozenset(
    {"ensure_run", "ensure_leg", "set_tag", "end", "log_metrics", "log_metric_history", "log_harness",
     "log_leaderboard", "log_split", "log_text", "log_figure", "log_checkpoint", "register_final"}
)  # fmt: skip


def _sources(root: Path) -> list[Path]:
    return [p for layer in LAYERS for p in sorted((root / layer).rglob("*.py"))]


def _receiver(node: ast.expr) -> str:
    """The dotted name a method is called on (``h.lineage`` for ``h.lineage.end(...)``), or ``""``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _method_calls(path: Path) -> list[tuple[int, str, str, ast.Call]]:
    """(line, receiver, method, call) of every ``receiver.method(...)`` call in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            out.append((node.lineno, _receiver(node.func.value), node.func.attr, node))
    return out


def leg_run_calls(root: Path) -> list[str]:
    """Every call of a leg's ``run`` outside the engine: ``<leg>.run(start)`` — the receiver names a leg
    (``leg``, ``step``, ``*Leg(...)``) or the one argument is a `LegStart`."""
    found = []
    for path in _sources(root):
        if path.resolve() == (root / "whale_core" / "ascent" / "engine.py").resolve():
            continue
        for line, recv, method, call in _method_calls(path):
            if method != "run":
                continue
            arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
            leg_like = recv.split(".")[-1].lower() in ("leg", "step") or (
                isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call)
                and _receiver(call.func.value.func).endswith("Leg")
            )  # fmt: skip
            starts = arg is not None and (
                (isinstance(arg, ast.Name) and "start" in arg.id.lower())
                or (isinstance(arg, ast.Call) and _receiver(arg.func).endswith("LegStart"))
            )
            if leg_like or starts:
                found.append(f"{path.relative_to(root)}:{line}: {recv}.run(...)")
    return found


def record_writes(root: Path) -> list[str]:
    """Every archive or lineage write outside ``whale_core/records/`` (the recorder is the one writer)."""
    found = []
    records = (root / "whale_core" / "records").resolve()
    for path in _sources(root):
        if records in path.resolve().parents:
            continue
        for line, recv, method, _ in _method_calls(path):
            last = recv.split(".")[-1].lower()
            archive_write = method in ARCHIVE_WRITES and last not in ("rec", "recorder")
            if archive_write or (method in LINEAGE_WRITES and "lineage" in recv.lower()):
                found.append(f"{path.relative_to(root)}:{line}: {recv}.{method}(...)")
    return found


def iteration_loops(root: Path) -> list[str]:
    """Loops in ``flows/`` over block-ascent iterations (the loop lives in the engine)."""
    found = []
    for path in sorted((root / "flows").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.For | ast.While):
                head = ast.unparse(node.iter if isinstance(node, ast.For) else node.test)
                body = " ".join(ast.unparse(b) for b in node.body)
                if any(w in head for w in ("max_legs", "iterations", "legs")) or "iteration(" in body:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {head}")
    return found


def test_the_library_imports_no_prefect() -> None:
    _, external = import_graph(REPO / PACKAGE)
    bad = sorted(f"{m} imports {n}" for m, names in external.items() for n in names if n.split(".")[0] == "prefect")
    assert not bad, bad


def test_only_the_engine_runs_a_leg_and_flows_hold_no_iteration_loop() -> None:
    assert leg_run_calls(REPO) == []
    assert iteration_loops(REPO) == []


def test_the_recorder_is_the_only_writer_of_the_records() -> None:
    assert record_writes(REPO) == []


def test_the_engine_checks_see_what_they_claim(tmp_path: Path) -> None:
    """Each check fires on a planted violation: a flow that runs a leg in a loop over iterations, a task that
    writes the archive, a CLI command that logs to MLflow directly."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "whale_core" / "ascent").mkdir()
    (tmp_path / "whale_core" / "ascent" / "engine.py").write_text("def f(leg, start):\n    return leg.run(start)\n")
    assert leg_run_calls(tmp_path) == [] and record_writes(tmp_path) == []
    (tmp_path / "flows" / "loop.py").write_text(
        "def f(cfg, leg, start):\n    for i in range(cfg.max_legs):\n        leg.run(start)\n"
    )
    (tmp_path / "tasks" / "t.py").write_text("def g(h):\n    h.archive.put_harness('s', 't')\n")
    (tmp_path / "whale_cli" / "c.py").write_text("def c(lineage, r):\n    lineage.log_metrics(r, {})\n")
    assert leg_run_calls(tmp_path) == ["flows/loop.py:3: leg.run(...)"]
    assert iteration_loops(tmp_path) == ["flows/loop.py:2: range(cfg.max_legs)"]
    assert record_writes(tmp_path) == [
        "tasks/t.py:2: h.archive.put_harness(...)",
        "whale_cli/c.py:2: lineage.log_metrics(...)",
    ]
