"""The raw drivers doing what the SQL store does: the same statements and round trips.

These are the statements the store's compiled SQL is to match (tables in `relay.store.schema`),
kept here in one place so they can be compared with the store's side by side. SQLite runs on the
calling thread with the store's connection settings; Postgres on one asyncpg connection, with
asyncpg's default prepared-statement cache.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relay.protocol import STARTED_WINDOW_MS

SQLITE_BUSY_TIMEOUT_MS = 30_000

ALLOCATE = (
    "INSERT INTO relay_revision (id, floor) VALUES (1, {first}) ON CONFLICT (id) DO UPDATE "
    "SET floor = {greatest}(relay_revision.floor + 1, {now}) + {count} - 1 RETURNING floor"
)
IDENTITY = "SELECT identity FROM relay_identities WHERE profile = {p}"
SCOPE_FLOOR = "SELECT floor FROM relay_started_scopes WHERE profile_id = {p}"
PRUNE = "DELETE FROM relay_started WHERE profile_id = {p} AND started_at < {cutoff}"
RECORD = (
    "INSERT INTO relay_started (profile_id, session_id, started_at, sent) "
    "VALUES ({p}, {s}, {at}, false) ON CONFLICT DO NOTHING"
)
CLAIM = (
    "UPDATE relay_started SET claimed_by = {o}, claimed_until = {u} "
    "WHERE profile_id = {p} AND session_id IN (SELECT session_id FROM relay_started "
    "WHERE profile_id = {p} AND NOT sent "
    "AND (claimed_until IS NULL OR claimed_until <= {now} OR claimed_by = {o}) "
    "ORDER BY started_at, session_id LIMIT {n}{lock}) RETURNING *"
)
MARK = (
    "UPDATE relay_started SET sent = true, claimed_by = NULL, claimed_until = NULL "
    "WHERE profile_id = {p} AND session_id = {s}"
)
ENQUEUE = (
    "INSERT INTO relay_deleted (id, session_id, profile, through, identity, scope_url, "
    "scope_publisher_id, scope_profile_id) VALUES ({id}, {s}, {profile}, {t}, NULL, NULL, NULL, "
    "NULL) ON CONFLICT (session_id, profile) DO UPDATE "
    "SET through = {greatest}(relay_deleted.through, excluded.through) RETURNING *"
)
ACK = "DELETE FROM relay_deleted WHERE id = {id} AND through = {t}"
FILL_SCOPE = (
    "INSERT INTO relay_started_scopes (profile_id, floor) VALUES ({p}, {floor}) "
    "ON CONFLICT DO NOTHING"
)
FILL = "INSERT INTO relay_started (profile_id, session_id, started_at, sent) VALUES ({row})"


def spelled(template: str, names: Sequence[str], dialect: str, **extra: str) -> str:
    """`template` with its named parameters as the driver's placeholders, in `names` order."""
    if dialect == "postgres":
        marks = {name: f"${n}" for n, name in enumerate(names, 1)}
        extra.setdefault("greatest", "greatest")
    else:
        marks = {name: f":{name}" for name in names}
        extra.setdefault("greatest", "max")
    return template.format(**marks, **extra)


def statements(dialect: str) -> dict[str, str]:
    """Every statement of the raw side, as `dialect`'s driver takes it."""
    lock = " FOR UPDATE SKIP LOCKED" if dialect == "postgres" else ""
    return {
        "allocate": spelled(ALLOCATE, ("first", "now", "count"), dialect),
        "identity": spelled(IDENTITY, ("p",), dialect),
        "scope_floor": spelled(SCOPE_FLOOR, ("p",), dialect),
        "prune": spelled(PRUNE, ("p", "cutoff"), dialect),
        "record": spelled(RECORD, ("p", "s", "at"), dialect),
        "claim": spelled(CLAIM, ("p", "o", "u", "now", "n"), dialect, lock=lock),
        "mark": spelled(MARK, ("p", "s"), dialect),
        "enqueue": spelled(ENQUEUE, ("id", "s", "profile", "t"), dialect),
        "ack": spelled(ACK, ("id", "t"), dialect),
        "fill_scope": spelled(FILL_SCOPE, ("p", "floor"), dialect),
    }


def cutoff(floor: int, now_ms: int) -> int:
    return max(floor, now_ms - STARTED_WINDOW_MS)


class SqliteRaw:
    """sqlite3 configured as the store's connection: WAL, synchronous=FULL, `BEGIN IMMEDIATE`."""

    def __init__(self, path: Path) -> None:
        self.sql = statements("sqlite")
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")

    def _write(self, *steps: tuple[str, dict[str, Any]]) -> list[Any]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            rows = [self.conn.execute(self.sql[name], args).fetchall() for name, args in steps]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return rows

    async def allocate(self, count: int, now_ms: int) -> int:
        first = max(1, now_ms) + count - 1
        rows = self._write(("allocate", {"first": first, "now": now_ms, "count": count}))
        return int(rows[0][0][0])

    async def identity(self, profile: str) -> str | None:
        row = self.conn.execute(self.sql["identity"], {"p": profile}).fetchone()
        return None if row is None else str(row[0])

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(self.sql["scope_floor"], {"p": profile_id}).fetchone()
            edge = cutoff(row[0] if row else now_ms, now_ms)
            self.conn.execute(self.sql["prune"], {"p": profile_id, "cutoff": edge})
            if at >= edge:
                self.conn.execute(self.sql["record"], {"p": profile_id, "s": session_id, "at": at})
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        claim = {"p": profile_id, "o": owner, "u": now_ms + lease_ms, "now": now_ms, "n": 1}
        claimed = self._write(("claim", claim))[0]
        for row in claimed:
            self._write(("mark", {"p": profile_id, "s": row[1]}))
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        args = {"id": view_id, "s": session_id, "profile": profile, "t": now_ms}
        row = self._write(("enqueue", args))[0][0]
        self.conn.execute("BEGIN IMMEDIATE")
        removed = self.conn.execute(self.sql["ack"], {"id": row[0], "t": row[3]}).rowcount
        self.conn.execute("COMMIT")
        return bool(removed == 1)

    async def fill_ledger(self, profile_id: str, floor: int, rows: list[tuple[str, int]]) -> None:
        """The scope and its entries, all sent, in one transaction (executemany)."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(self.sql["fill_scope"], {"p": profile_id, "floor": floor})
        self.conn.executemany(
            FILL.format(row="?, ?, ?, 1"), [(profile_id, sid, at) for sid, at in rows]
        )
        self.conn.execute("COMMIT")

    async def close(self) -> None:
        self.conn.close()


class PostgresRaw:
    """One asyncpg connection; single statements in autocommit, as the store runs them."""

    def __init__(self, conn: Any) -> None:
        self.sql = statements("postgres")
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str) -> PostgresRaw:
        import asyncpg

        return cls(await asyncpg.connect(dsn, timeout=10))

    async def allocate(self, count: int, now_ms: int) -> int:
        first = max(1, now_ms) + count - 1
        return int(await self.conn.fetchval(self.sql["allocate"], first, now_ms, count))

    async def identity(self, profile: str) -> str | None:
        found = await self.conn.fetchval(self.sql["identity"], profile)
        return None if found is None else str(found)

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        async with self.conn.transaction():
            floor = await self.conn.fetchval(self.sql["scope_floor"], profile_id)
            edge = cutoff(now_ms if floor is None else floor, now_ms)
            await self.conn.execute(self.sql["prune"], profile_id, edge)
            if at >= edge:
                await self.conn.execute(self.sql["record"], profile_id, session_id, at)

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        claimed = await self.conn.fetch(
            self.sql["claim"], profile_id, owner, now_ms + lease_ms, now_ms, 1
        )
        for row in claimed:
            await self.conn.execute(self.sql["mark"], profile_id, row["session_id"])
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        row = await self.conn.fetchrow(self.sql["enqueue"], view_id, session_id, profile, now_ms)
        done = await self.conn.execute(self.sql["ack"], row["id"], row["through"])
        return bool(done == "DELETE 1")

    async def fill_ledger(self, profile_id: str, floor: int, rows: list[tuple[str, int]]) -> None:
        """The scope and its entries, all sent, by COPY."""
        await self.conn.execute(self.sql["fill_scope"], profile_id, floor)
        await self.conn.copy_records_to_table(
            "relay_started",
            records=[(profile_id, sid, at, True) for sid, at in rows],
            columns=["profile_id", "session_id", "started_at", "sent"],
        )
        await self.conn.execute("ANALYZE relay_started")

    async def close(self) -> None:
        await self.conn.close()


Raw = SqliteRaw | PostgresRaw
