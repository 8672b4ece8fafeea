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
