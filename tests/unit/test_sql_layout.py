"""The SQL store's layout holds: the bench runs the store's statements through `steps` only, and
each aggregate's module reaches its driver through the `Runner` port alone."""

from __future__ import annotations

import ast
from pathlib import Path

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
