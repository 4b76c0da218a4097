"""The server's connection modules import downward only.

`Server` is built from its parts (client connections, their subscriptions, the routed
cluster); the parts see the server through the protocols in `ingest.server.host` and
`ingest.server.cluster.ports`. Every import counts here, at module level, inside a
function or under `TYPE_CHECKING`: an import hidden in a function or a type-checking
block still ties the two modules together, so a cycle through one is a cycle.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The parts below the server: none may reach a module that reaches back to it.
ACYCLIC = (
    "ingest.server.client",
    "ingest.server.subscription",
    "ingest.server.link",
    "ingest.server.host",
    "ingest.server.version",
    "ingest.server.tls_settings",
    "ingest.server.accounts.limits",
    "ingest.server.cluster",  # and every module in the package
)
SERVER = "ingest.server.server"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, name: str, modules: set[str], *, package: bool = False) -> set[str]:
    """Every module of `modules` that module `name` imports, wherever the statement is."""
    package_name = name if package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package_name.split(".")
                up = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


@functools.cache
def import_graph(package: str = "ingest") -> dict[str, set[str]]:
    paths = {module_name(p): p for p in (ROOT / package).rglob("*.py")}
    modules = set(paths)
    return {
        name: imports(path.read_text(), name, modules, package=path.name == "__init__.py")
        for name, path in paths.items()
    }


def reachable(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def cycle_through(graph: Mapping[str, Iterable[str]], start: str) -> list[str] | None:
    """One import path from `start` back to itself, or None."""
    paths: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop(0)
        for nxt in graph.get(module, ()):
            if nxt == start:
                return [*paths[module], start]
            if nxt not in paths:
                paths[nxt] = [*paths[module], nxt]
                todo.append(nxt)
    return None


def guarded(graph: Mapping[str, Iterable[str]]) -> list[str]:
    return sorted(m for m in graph if any(m == g or m.startswith(g + ".") for g in ACYCLIC))


def test_the_cycle_finder_sees_imports_hidden_in_functions_and_type_checking() -> None:
    modules = {"pkg.a", "pkg.b", "pkg.c"}
    hidden = "def f():\n    from pkg import b\n"
    typing = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    graph = {
        "pkg.a": imports(hidden, "pkg.a", modules),
        "pkg.b": imports(typing, "pkg.b", modules),
        "pkg.c": imports("import pkg.a\n", "pkg.c", modules),
    }
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycle_through(graph, "pkg.a") == ["pkg.a", "pkg.b", "pkg.a"]
    assert cycle_through(graph, "pkg.c") is None
    assert reachable(graph, "pkg.c") == {"pkg.a", "pkg.b"}


def test_imports_are_found_at_every_level() -> None:
    graph = import_graph()
    # main.py imports Monitor inside a function, server.py its parts at module level,
    # and client.py the host protocols under TYPE_CHECKING: all three are edges.
    assert "ingest.server.monitor" in graph["ingest.server.main"]
    assert "ingest.server.client" in graph[SERVER]
    assert "ingest.server.host" in graph["ingest.server.client"]


def test_the_server_parts_import_no_cycle() -> None:
    graph = import_graph()
    parts = guarded(graph)
    assert len(parts) > 10, parts  # the package was found
    cycles = {m: cycle_through(graph, m) for m in parts}
    assert {m: c for m, c in cycles.items() if c} == {}


def test_no_part_reaches_the_server() -> None:
    graph = import_graph()
    assert [m for m in guarded(graph) if SERVER in reachable(graph, m)] == []
