"""The broker's import structure, read from its sources with `ast`.

- Only the wiring (`gregor.broker.server`) knows the whole broker: no other module imports
  it except the CLI (`gregor.broker.__main__`). The parts get narrow interfaces.
- No import circle anywhere in gregor-broker, imports under `TYPE_CHECKING` included.

A module imports its own package's `__init__` implicitly; that is not counted. `from pkg
import name` counts as importing `pkg.name` when that is a module, else `pkg`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "gregor.broker"
WIRING = "gregor.broker.server"
MAY_IMPORT_WIRING = {"gregor.broker.__main__"}


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in (SOURCES / "gregor" / "broker").rglob("*.py"):
        parts = list(path.relative_to(SOURCES).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the gregor-broker modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        base = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                    source = ".".join([*anchor, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in modules else source)
        edges = set()
        for target in targets:
            parts = target.split(".")
            # Importing a.b.c runs a.b first: count every enclosing package, except our own.
            for end in range(2, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    edges.add(prefix)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_graph_sees_the_packages_modules() -> None:
    graph = import_graph()
    assert WIRING in graph
    assert "gregor.broker.replica_manager" in graph["gregor.broker.server"]
    assert "gregor.broker.partition" in graph["gregor.broker.replica_manager"]


def test_only_the_cli_imports_the_wiring() -> None:
    graph = import_graph()
    importers = {name for name, targets in graph.items() if WIRING in targets}
    assert importers <= MAY_IMPORT_WIRING, sorted(importers - MAY_IMPORT_WIRING)


def test_no_import_circle() -> None:
    assert import_cycles(import_graph()) == []


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
