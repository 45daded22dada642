"""The import graph of `relay`, read from its source with `ast`: every import counts, at module
level, inside a function (a lazy import ties two modules as firmly) or under `TYPE_CHECKING`."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import relay

ROOT = Path(relay.__file__).parent


def module_name(path: Path) -> str:
    """`relay/store/sql/migrate.py` -> `relay.store.sql.migrate`; a package is its `__init__`."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _nearest(name: str) -> str | None:
    """The module `name` lands in: itself, or the package holding the name it imports."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str) -> set[str]:
    """The `relay` modules `name` imports (`from a import b` is `a.b` where b is a module, else
    `a`; relative imports resolved), itself left out."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            wanted = [f"{base}.{alias.name}" for alias in node.names]
            wanted = [full if full in MODULES else base for full in wanted]
        else:
            continue
        for each in wanted:
            target = _nearest(each) if each.split(".")[0] == "relay" else None
            if target is not None and target != name:
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """What each `relay` module imports, read once a process (a third of a second: not at
    collection, in every worker)."""
    return {name: imports(name) for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each group of modules that all reach one another, sorted."""
    reach: dict[str, set[str]] = {}
    for start, targets in graph.items():
        seen: set[str] = set()
        todo = list(targets)
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        reach[start] = seen
    groups = {frozenset(w for w in reach[v] if v in reach[w]) for v in graph if v in reach[v]}
    return sorted(sorted(group) for group in groups)
