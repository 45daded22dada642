"""Plans that stay flat: every statement of the hot paths, at 100,000 rows in one scope, reads its
table through an index, on Postgres right after a bulk load (no statistics) and after ANALYZE, and
on SQLite (issue 22; PgQueuer's query-plan regression tests are the model).

The statements are the ones the store really runs, caught as it runs them: on Postgres
`auto_explain` (loaded for this test's own database only) sends the plan of every statement,
those `relay_batch` runs inside included, to the connection that ran it; on SQLite the trace
callback gives each statement, which `EXPLAIN QUERY PLAN` then reads. A test fails on a sequential
scan of a table that holds 100,000 rows; on Postgres also on a scan of one that the planner expects
to return a tenth of it or more outside a LIMIT (a bound it cannot see reads as a third of the
table: one statistic away from a sequential scan, or a bitmap of a third of the table); and when a
hot path ran no statement on a table it should have touched (the capture broke). Postgres runs
each state on a database of its own: right after the load, and after ANALYZE. The plans are
custom ones (the values known), as `relay_batch` always makes and asyncpg's prepared statements
keep while a generic plan would cost more. docs/query-plans.md says how to read a failure.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from databases import admin_execute, pg_store_url

from relay.store import DeletedScope, RelayStore, RunState, open_store

# One worker runs the module (`--dist loadgroup`): it loads each of the two 100,000-row databases
# once, where every worker that drew one of its tests would load its own.
pytestmark = pytest.mark.xdist_group("query_plans")

N = 100_000
NOW = 1_800_000_000_000
HOUR = 3_600_000
OWNER = "plans/aaaaaaaaaaaa"
OTHER = "other/bbbbbbbbbbbb"
SCOPE = "scope-big"
PROFILE = "profile-big"
RELAY_SCOPE = DeletedScope("https://relay.example", "https://hermes.example", SCOPE)
# The tables a hot path reads or writes that hold the 100,000 rows.
BIG = frozenset({"relay_started", "relay_deleted", "relay_runs"})
LEASE_MS = 20_000
# A sequential scan, or (Postgres) a scan expected to return a tenth of the table.
BAD = frozenset({"seq", "wide"})


# ── the rows: 100,000 in one scope of each big table, loaded in one statement each ──────────

# Ledger: the scope's entries seen in the last day, all sent but five; outbox: a backlog of one
# profile's bound deletions nobody holds; runs: another live replica's finished turns.
_ROWS = {
    "relay_started_scopes": ("profile_id, floor", f"'{SCOPE}', {NOW - 240 * HOUR}", None),
    "relay_started": (
        "profile_id, session_id, started_at, sent",
        f"'{SCOPE}', 'fill-' || g, {NOW - 12 * HOUR} + g, g <= {N - 5}",
        N,
    ),
    "relay_deleted": (
        "id, session_id, profile, through, identity, scope_url, scope_publisher_id,"
        " scope_profile_id",
        f"'del-' || g, 'gone-' || g, '{PROFILE}', {NOW - N} + g, 'identity-1',"
        f" '{RELAY_SCOPE.url}', '{RELAY_SCOPE.publisher_id}', '{SCOPE}'",
        N,
    ),
    "relay_runs": (
        "session_id, profile, title, phase, started_at, updated_at, owner, lease_until",
        f"'run-' || g, '{PROFILE}', 'a turn', 'completed', {NOW - 2 * HOUR} + g,"
        f" {NOW - HOUR}, '{OTHER}', {NOW + HOUR}",
        N,
    ),
}


def _postgres_load() -> str:
    parts = []
    for table, (columns, values, count) in _ROWS.items():
        source = f"SELECT {values}" + (f" FROM generate_series(1, {count}) AS g" if count else "")
        parts.append(f"INSERT INTO {table} ({columns}) {source}")
    return ";".join(parts)


def _sqlite_load() -> str:
    parts = []
    for table, (columns, values, count) in _ROWS.items():
        if count:
            parts.append(
                f"INSERT INTO {table} ({columns}) WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL"
                f" SELECT g + 1 FROM n WHERE g < {count}) SELECT {values} FROM n"
            )
        else:
            parts.append(f"INSERT INTO {table} ({columns}) SELECT {values}")
    return ";".join(parts) + ";"


# ── the hot paths, through the public store API ─────────────────────────────────────────────


def _live_run() -> RunState:
    return RunState(
        "live-1", None, PROFILE, "a live turn", "running", NOW - HOUR, NOW - HOUR, OWNER
    )


async def _pass(store: RelayStore) -> None:
    await store.pass_view(OWNER, [PROFILE], [SCOPE], NOW)
    await store.pass_write(OWNER, [_live_run()], NOW, lease_ms=LEASE_MS, retention_ms=24 * HOUR)
    await store.release_runs(OWNER)


async def _idle(store: RelayStore) -> None:
    await store.keep_alive(OWNER, NOW, LEASE_MS)


async def _ledger(store: RelayStore) -> None:
    await store.track_started([SCOPE], NOW)
    await store.record_started_scopes({SCOPE: [("new-1", NOW)]}, NOW)
    claimed = await store.claim_started_scopes([SCOPE], OWNER, NOW, LEASE_MS, 64)
    sent = [(entry.profile_id, entry.session_id) for entry in claimed]
    await store.claim_started_scopes([SCOPE], OWNER, NOW, LEASE_MS, 64, sent=sent)


async def _outbox(store: RelayStore) -> None:
    view = await store.enqueue_deleted(
        "gone-new", PROFILE, NOW, session_live=True, identity=None, scope=None
    )
    await store.bind_deleted(PROFILE, "identity-1", RELAY_SCOPE)
    for claimed in await store.claim_deleted(OWNER, NOW, LEASE_MS, 64):
        await store.ack_deleted(claimed.id, claimed.through)
    await store.ack_deleted(view.id, view.through)


HotPath = Callable[[RelayStore], Awaitable[None]]
# Each hot path, and the big tables its statements must be seen touching.
HOT: dict[str, tuple[HotPath, frozenset[str]]] = {
    "pass": (_pass, frozenset({"relay_started", "relay_deleted", "relay_runs"})),
    "idle": (_idle, frozenset({"relay_started", "relay_deleted", "relay_runs"})),
    "ledger": (_ledger, frozenset({"relay_started"})),
    "outbox": (_outbox, frozenset({"relay_deleted"})),
}


@dataclass
class Plan:
    """One statement the store ran, and what its plan reads."""

    sql: str
    scans: list[tuple[str, str]] = field(default_factory=list)  # (how, table)

    def tables(self) -> set[str]:
        return {table for _, table in self.scans}

    def sequential(self) -> list[str]:
        return sorted(
            {f"{how} {table}" for how, table in self.scans if how in BAD and table in BIG}
        )


def _verdict(plans: list[Plan], touched: frozenset[str]) -> None:
    seen = set().union(*(plan.tables() for plan in plans)) if plans else set()
    missing = touched - seen
    assert not missing, f"no statement seen on {sorted(missing)}: the capture missed them"
    bad = [f"{', '.join(plan.sequential())}: {plan.sql}" for plan in plans if plan.sequential()]
    assert not bad, "sequential scans of 100,000-row tables:\n" + "\n\n".join(bad)


# ── Postgres: auto_explain on the test's own database ───────────────────────────────────────

_AUTO_EXPLAIN = {
    "session_preload_libraries": "auto_explain",
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_format": "json",
    # NOTICE reaches the client at the default client_min_messages, and not the server's log.
    "auto_explain.log_level": "notice",
}


def _pg_scans(node: dict[str, Any], found: list[tuple[str, str]], limited: bool = False) -> None:
    """Each scan of a table: `seq`, `wide` (expected to return a tenth of the rows or more, not
    under a LIMIT: a misestimate one statistic away from a sequential scan) or its node type."""
    kind, relation = node.get("Node Type", ""), node.get("Relation Name")
    limited = limited or kind == "Limit"
    if relation and kind != "ModifyTable":
        wide = not limited and node.get("Plan Rows", 0) >= N // 10
        found.append(("seq" if kind == "Seq Scan" else "wide" if wide else kind, relation))
    for child in node.get("Plans", ()):
        _pg_scans(child, found, limited)


def _pg_plan(text: str) -> Plan | None:
    start = text.find("{")
    if "plan:" not in text or start < 0:
        return None
    explained = json.loads(text[start:])
    plan = Plan(" ".join(explained.get("Query Text", "").split()))
    _pg_scans(explained["Plan"], plan.scans)
    return plan


@pytest.fixture(scope="module", params=["bulk-load", "analyzed"])
def pg_big(request: pytest.FixtureRequest, pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A database of its own, copied from the migrated template, that explains every statement:
    as the bulk load left it (no statistics), or analyzed. Its hot paths share it."""
    name = f"relay_plans_{uuid.uuid4().hex[:12]}"
    settings = [f"ALTER DATABASE \"{name}\" SET {k} = '{v}'" for k, v in _AUTO_EXPLAIN.items()]
    asyncio.run(
        admin_execute(pg_admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"', *settings)
    )
    url = pg_store_url(pg_admin_url, name)
    # No autovacuum: "right after a bulk load" stays without statistics while the test runs.
    quiet = [f"ALTER TABLE {table} SET (autovacuum_enabled = false)" for table in _ROWS]
    asyncio.run(admin_execute(url, *quiet, _postgres_load()))
    if request.param == "analyzed":
        asyncio.run(admin_execute(url, *(f"ANALYZE {table}" for table in _ROWS)))
    try:
        yield url
    finally:
        drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
        asyncio.run(admin_execute(pg_admin_url, drop))


@pytest.fixture
def pg_plans(monkeypatch: pytest.MonkeyPatch) -> list[Plan]:
    """The plans of every statement run on a connection the store opens from here on."""
    import asyncpg

    plans: list[Plan] = []
    connect = asyncpg.connect

    def heard(_conn: Any, message: Any) -> None:
        plan = _pg_plan(str(getattr(message, "message", "")))
        if plan is not None:
            plans.append(plan)

    async def explaining(*args: Any, **kwargs: Any) -> Any:
        conn = await connect(*args, **kwargs)
        conn.add_log_listener(heard)
        return conn

    monkeypatch.setattr(asyncpg, "connect", explaining)
    return plans


async def _pg_run(url: str, plans: list[Plan], hot: str) -> list[Plan]:
    run, _ = HOT[hot]
    async with open_store(url) as store:
        await asyncio.sleep(0.05)  # the open's own statements are heard, and dropped
        plans.clear()
        await run(store)
        await asyncio.sleep(0.05)  # a notice's listener runs on a later turn of the loop
        return list(plans)


@pytest.mark.parametrize("hot", list(HOT))
async def test_postgres_plans(pg_big: str, pg_plans: list[Plan], hot: str) -> None:
    """Each hot path's statements use an index on Postgres with 100,000 rows in one scope, right
    after the rows were loaded (no statistics yet) and after ANALYZE."""
    found = await _pg_run(pg_big, pg_plans, hot)
    _verdict(found, HOT[hot][1])


# ── SQLite: the trace callback, then EXPLAIN QUERY PLAN ────────────────────────────────────

_SQLITE_SCAN = re.compile(r"^(SCAN|SEARCH) (\w+)(?: AS \w+)?( USING .*)?$")
_NOT_PLANNED = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|PRAGMA|SAVEPOINT|RELEASE)\b", re.I)


def _sqlite_plan(conn: sqlite3.Connection, sql: str) -> Plan:
    plan = Plan(" ".join(sql.split()))
    for _id, _parent, _unused, detail in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
        found = _SQLITE_SCAN.match(detail)
        if found:
            how = "seq" if found[1] == "SCAN" and not found[3] else "index"
            plan.scans.append((how, found[2]))
    return plan


@pytest.fixture
def sqlite_heard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement run on a SQLite connection opened from here on, its values in place."""
    heard: list[str] = []
    connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = connect(*args, **kwargs)
        conn.set_trace_callback(heard.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing)
    return heard


@pytest.fixture
async def sqlite_big(tmp_path: Path) -> Path:
    """A migrated SQLite store holding the rows."""
    path = tmp_path / "relay.db"
    async with open_store(f"sqlite:///{path}"):
        pass  # migrated
    conn = sqlite3.connect(path)
    try:
        conn.executescript(_sqlite_load())
    finally:
        conn.close()
    return path


@pytest.mark.parametrize("hot", list(HOT))
async def test_sqlite_plans(sqlite_big: Path, sqlite_heard: list[str], hot: str) -> None:
    """Each hot path's statements use an index on SQLite with 100,000 rows in one scope, without
    statistics, as the store keeps its database (it never runs ANALYZE there)."""
    run, touched = HOT[hot]
    async with open_store(f"sqlite:///{sqlite_big}") as store:
        sqlite_heard.clear()
        await run(store)
        ran = [sql for sql in sqlite_heard if not _NOT_PLANNED.match(sql)]
    conn = sqlite3.connect(sqlite_big)
    try:
        plans = [_sqlite_plan(conn, sql) for sql in ran]
    finally:
        conn.close()
    _verdict(plans, touched)
