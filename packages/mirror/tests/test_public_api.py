"""gregor-mirror uses only gregor-client's public API (issue 14: it must work between any
Kafka clusters, and follow gregor-client's releases without reaching into its inside).

Every `gregor.*` module the mirror's source imports is one of the mirror's own or one
gregor-client names as public in its package docstring; each name imported from
`gregor.client` is in its `__all__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gregor.client
import gregor.mirror

PUBLIC = {
    "gregor.client",
    "gregor.client.admin",
    "gregor.client.exporter",
    "gregor.client.logs",
    "gregor.protocol.errors",
}


def imports(source: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of each `gregor.*` import in the file, however deeply nested."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return [(m, names) for m, names in found if m.startswith("gregor.")]


def test_the_mirror_imports_only_gregor_clients_public_api() -> None:
    sources = sorted(Path(gregor.mirror.__file__).parent.glob("*.py"))
    assert len(sources) > 10
    outside = {
        f"{source.name}: {module}"
        for source in sources
        for module, _ in imports(source)
        if module not in PUBLIC and not module.startswith("gregor.mirror")
    }
    assert not outside, sorted(outside)
    unexported = {
        f"{source.name}: {name}"
        for source in sources
        for module, names in imports(source)
        if module == "gregor.client"
        for name in names
        if name not in gregor.client.__all__
    }
    assert not unexported, sorted(unexported)


def test_the_public_modules_are_named_as_such_by_gregor_client() -> None:
    doc = gregor.client.__doc__ or ""
    for module in PUBLIC - {"gregor.client"}:
        assert f"`{module}`" in doc, module
