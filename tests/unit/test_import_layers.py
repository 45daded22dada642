"""The layers of docs/design.md hold in the imports: no cycle among `relay`'s modules, and no
import running up the layers, whether at module level, inside a function or for types only."""

from __future__ import annotations

from import_graph import cycles, graph

# The ground every layer stands on: these import nothing of `relay` but one another.
GROUND = {
    "relay.errors",
    "relay.hints",
    "relay.logfields",
    "relay.metrics",
    "relay.protocol",
    "relay.refused",
    "relay.tracing",
    "relay.version",
}


def _in(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _reaching(where: str, *exempt: str) -> dict[str, set[str]]:
    """What each module inside `where` (but `exempt`) imports."""
    return {n: t for n, t in graph().items() if _in(n, where) and not _in(n, *exempt)}


def test_no_import_cycle() -> None:
    """No two modules of `relay` reach each other through imports."""
    assert cycles(graph()) == []


def test_the_operator_page_knows_nothing_of_the_service() -> None:
    """The gatherer takes the store and what the service tells of itself (`Own`): the service
    builds it, never the other way round, so `status` gathers without a service."""
    for name, targets in _reaching("relay.operator").items():
        assert "relay.service" not in targets, name


def test_nothing_climbs_to_the_package_top() -> None:
    """`relay/__init__.py` gathers the public names; no module imports a name from it (the
    version is `relay.version`), only its submodules."""
    assert [name for name, targets in graph().items() if "relay" in targets] == []


def test_the_ground_imports_only_the_ground() -> None:
    """Errors, the wire's limits, logs fields, telemetry and the version import nothing above."""
    for name in GROUND:
        assert graph()[name] <= GROUND, name


def test_the_store_imports_only_itself_and_the_ground() -> None:
    """`relay/store` never imports the publisher, the service, the CLI or the package top."""
    for name, targets in _reaching("relay.store").items():
        assert {t for t in targets if not _in(t, "relay.store")} <= GROUND, name


def test_the_drivers_import_nothing_of_the_store_above_them() -> None:
    """`sql/drivers` runs statements: it never reaches the URL parser or the store's hooks, only
    the pure Postgres URL rules below them (hosts, the connection budget); a driver's error is
    translated beside the SQLSTATE table. The URL parser imports nothing of `store/sql`."""
    below = ["relay.store.sql.drivers", "relay.store.sql.dialect", "relay.store.forkgate"]
    below += ["relay.store.hosts", "relay.store.budget"]
    for name, targets in _reaching("relay.store.sql.drivers").items():
        assert {t for t in targets if not _in(t, *below)} <= GROUND, name
    assert not [t for t in graph()["relay.store.url"] if _in(t, "relay.store.sql")]


def test_publishing_imports_nothing_above_it() -> None:
    """The publisher is driven by the service: it never imports the service, the routes, the
    operator page, the threaded facade, the CLI or the test kit."""
    above = ["relay.service", "relay.routes", "relay.asgi", "relay.wsgi", "relay.operator"]
    above += ["relay.threaded", "relay.cli", "relay.testing"]
    for name, targets in _reaching("relay.publishing").items():
        assert not [t for t in targets if _in(t, *above)], name


def test_only_the_cli_imports_the_cli() -> None:
    """The command line is the top: only it (and `python -m relay`) imports `relay.cli`."""
    for name, targets in _reaching("relay", "relay.cli", "relay.__main__").items():
        assert not [t for t in targets if _in(t, "relay.cli")], name
