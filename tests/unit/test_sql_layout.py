"""The SQL store's layout holds: the bench reaches the store's insides through
`relay.store.testing_hooks` only, each aggregate's module reaches its driver through the `Runner`
port alone, and nothing outside the store imports `relay.store.sql` (its door is
`relay.store.migrations`)."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import graph

import relay

ROOT = Path(relay.__file__).parent
CHECKOUT = ROOT.parent
# The SQL modules that are not an aggregate: the adapter that opens the drivers, and the
# migrations, which run Alembic on SQLAlchemy engines.
NOT_AGGREGATES = {"__init__", "backend", "migrate"}
AGGREGATES = sorted(
    path.stem for path in (ROOT / "store" / "sql").glob("*.py") if path.stem not in NOT_AGGREGATES
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


def test_the_bench_reaches_the_sql_store_through_the_testing_hooks_only() -> None:
    """`benchmarks/` imports nothing of `relay.store.sql`: the statements it runs raw and what
    it counts come from `relay.store.testing_hooks` (an aggregate's `Statements` is no API)."""
    for path in sorted((CHECKOUT / "benchmarks").glob("*.py")):
        reached = {module for module in imported(path) if module.startswith("relay.store.sql")}
        assert not reached, path.name


def test_an_aggregate_uses_its_driver_through_the_runner_port_only() -> None:
    """An aggregate's module imports nothing of `sql/drivers/` but `runner`, so one body serves
    SQLite and Postgres alike (the aggregates are globbed, so a new one is held to it too)."""
    assert {"backlog", "fleet", "ledger", "outbox", "registration"} <= set(AGGREGATES)
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
    """Every module outside `relay/store` reaches the schema through `relay.store.migrations`:
    no `import relay.store.sql…`, no `from relay.store.sql… import`, no `from relay.store import
    sql`, no relative form, even lazily."""
    for name, targets in graph().items():
        if _in(name, "relay.store"):
            continue
        assert not [t for t in targets if _in(t, "relay.store.sql")], name
