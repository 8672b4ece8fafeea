"""The command line sits above the flows, the flows above the library: `whale_core` imports neither `flows`, `tasks`
nor `whale_cli` — at module level or inside a function (issue #19, item 1). Read from the import statements of every
module's source, so a lazy import counts too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UPPER = ("flows", "tasks", "whale_cli")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute module name ``path`` imports, with its line (relative imports stay inside the package)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_whale_core_imports_no_layer_above_it() -> None:
    modules = sorted((REPO / "whale_core").rglob("*.py"))
    assert len(modules) > 20  # the library's modules were found
    upward = [
        f"{p.relative_to(REPO)}:{line} imports {name}"
        for p in modules
        for line, name in _imports(p)
        if name.split(".")[0] in UPPER
    ]
    assert upward == []


def test_the_command_line_is_not_in_the_library() -> None:
    assert not list((REPO / "whale_core").glob("cli*.py"))
    assert (REPO / "whale_cli" / "app.py").is_file()
