"""The SQL store's layout holds: the bench runs the store's statements through `steps` only,
each aggregate's module reaches its driver through the `Runner` port alone, and nothing outside
the store imports `relay.store.sql` (its door is `relay.store.migrations`)."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import GRAPH

import relay

ROOT = Path(relay.__file__).parent
AGGREGATES = (
    "claims",
    "ledger",
    "outbox",
    "passes",
    "presence",
    "registration",
    "revisions",
    "runs",
    "transfer",
)


def imported(path: Path) -> set[str]:
    """Every module `path` imports, with `from a import b` also read as `a.b`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_the_bench_reaches_no_aggregate_of_the_sql_store() -> None:
    """`relay/cli/bench` imports the statements it runs from `relay.store.sql.steps`, never from
    an aggregate's module (`ledger.statements()` and the like are not an API)."""
    private = {f"relay.store.sql.{name}" for name in AGGREGATES}
    for path in sorted((ROOT / "cli" / "bench").glob("*.py")):
        assert not imported(path) & private, path.name


def test_an_aggregate_uses_its_driver_through_the_runner_port_only() -> None:
    """An aggregate's module imports nothing of `sql/drivers/` but `runner`, so one body serves
    SQLite and Postgres alike."""
    for name in AGGREGATES:
        modules = imported(ROOT / "store" / "sql" / f"{name}.py")
        drivers = {
            ".".join(module.split(".")[:5])
            for module in modules
            if module.startswith("relay.store.sql.drivers.")
        }
        assert drivers <= {"relay.store.sql.drivers.runner"}, name


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_nothing_outside_the_store_imports_its_sql() -> None:
    """Every module outside `relay/store` (but the bench, which leaves the package) reaches the
    schema through `relay.store.migrations`: no `import relay.store.sql…`, no `from
    relay.store.sql… import`, no `from relay.store import sql`, no relative form, even lazily."""
    for name, targets in GRAPH.items():
        if _in(name, "relay.store") or _in(name, "relay.cli.bench"):
            continue
        assert not [t for t in targets if _in(t, "relay.store.sql")], name
