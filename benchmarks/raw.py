"""The raw drivers running the store's own statements, with nothing of the store around them.

The statements and their parameters come from `relay.store.testing_hooks`, built by the functions
the store's hooks build them with, so the two sides cannot drift apart; the raw side makes the same
transactions and round trips, on one connection, without the store's checks, the pool, the
runner or the records read back. SQLite runs on the calling thread, on a connection the store's
own `connect` opened (WAL, synchronous=FULL, busy timeout); Postgres on one asyncpg connection,
with asyncpg's default prepared-statement cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.store import DeletedView, StartedEntry, StartedScope
from relay.store import testing_hooks as steps
from relay.store.testing_hooks import POSTGRES, SQLITE, Claim, Deletion, Dialect

Call = steps.Call


def allocate(d: Dialect, count: int, now_ms: int) -> Call:
    step = steps.allocate_revisions(d, count, now_ms)
    assert step is not None, "the bench's clock stays far below 2^53-1"
    return step


def record(d: Dialect, profile_id: str, session_id: str, at: int, now_ms: int) -> list[Call]:
    """One sighting, as the store's ledger hook records it (its cutoff read by the statements)."""
    found = steps.record_started(d, {profile_id: {session_id: at}}, now_ms)
    return [(q, params) for q, params in found if isinstance(params, Mapping)]


def claim(d: Dialect, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> Call:
    """A claim of one entry in one scope, as a pass's claim asks for it."""
    return steps.claim_started(d, [profile_id], Claim(owner, now_ms, now_ms + lease_ms, 1))


def mark(d: Dialect, profile_id: str, session_id: str) -> Call:
    """One entry marked sent: the marks alone, as a claim of no scope sends them."""
    q, rows = steps.mark_sent(d, [(profile_id, session_id)])
    return q, rows[0]


def enqueue(d: Dialect, view_id: str, session_id: str, profile: str, through: int) -> Call:
    """An unbound outbox entry queued while its session still has data."""
    new = DeletedView(view_id, session_id, profile, through, None, None)
    return steps.enqueue_deleted(d, Deletion(new, session_live=True))


def filled(profile_id: str, floor: int, rows: list[tuple[str, int]]) -> StartedScope:
    """A scope whose entries are all sent."""
    entries = tuple(StartedEntry(profile_id, sid, at, sent=True) for sid, at in rows)
    return StartedScope(profile_id, floor, entries)


class SqliteRaw:
    """sqlite3 as the store's writer uses it: every write in `BEGIN IMMEDIATE` … `COMMIT`."""

    def __init__(self, path: Path) -> None:
        self.d = SQLITE
        self.conn = steps.connect_sqlite(path, busy_timeout_s=steps.BUSY_TIMEOUT_S)

    def _write(self, *calls: Call) -> list[list[Any]]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            rows = [self.conn.execute(q.sql, q.args(p)).fetchall() for q, p in calls]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return rows

    def _scalar(self, call: Call) -> Any:
        q, params = call
        row = self.conn.execute(q.sql, q.args(params)).fetchone()
        return None if row is None else row[0]

    async def allocate(self, count: int, now_ms: int) -> int:
        return int(self._write(allocate(self.d, count, now_ms))[0][0][0])

    async def identity(self, profile: str) -> str | None:
        found = self._scalar(steps.profile_identity(self.d, profile))
        return None if found is None else str(found)

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        self._write(*record(self.d, profile_id, session_id, at, now_ms))

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        claimed = self._write(claim(self.d, profile_id, owner, now_ms, lease_ms))[0]
        for row in claimed:
            self._write(mark(self.d, profile_id, row[1]))
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        queued = self._write(enqueue(self.d, view_id, session_id, profile, now_ms))[0][0]
        q, params = steps.ack_deleted(self.d, queued[0], queued[3])
        self.conn.execute("BEGIN IMMEDIATE")
        removed = self.conn.execute(q.sql, q.args(params))
        self.conn.execute("COMMIT")
        return bool(removed.rowcount == 1)

    async def fill_ledger(
        self, profile_id: str, floor: int, rows: list[tuple[str, int]], *, analyze: bool = True
    ) -> None:
        """The scope and its entries, all sent, in one transaction (the merge's statements);
        SQLite keeps no statistics unless asked (`analyze` is for Postgres)."""
        (scope, floor_row), (entry, entries) = steps.merge_ledger(
            self.d, filled(profile_id, floor, rows)
        )
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(scope.sql, scope.args(floor_row))
        self.conn.executemany(entry.sql, [entry.args(row) for row in entries])
        self.conn.execute("COMMIT")

    async def close(self) -> None:
        self.conn.close()


class PostgresRaw:
    """One asyncpg connection: one-statement calls in autocommit, as the store runs them."""

    def __init__(self, conn: Any) -> None:
        self.d = POSTGRES
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str) -> PostgresRaw:
        import asyncpg

        return cls(await asyncpg.connect(dsn, timeout=10))

    async def allocate(self, count: int, now_ms: int) -> int:
        q, params = allocate(self.d, count, now_ms)
        return int(await self.conn.fetchval(q.sql, *q.args(params)))

    async def identity(self, profile: str) -> str | None:
        q, params = steps.profile_identity(self.d, profile)
        found = await self.conn.fetchval(q.sql, *q.args(params))
        return None if found is None else str(found)

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        async with self.conn.transaction():
            for q, params in record(self.d, profile_id, session_id, at, now_ms):
                await self.conn.execute(q.sql, *q.args(params))

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        q, params = claim(self.d, profile_id, owner, now_ms, lease_ms)
        claimed = await self.conn.fetch(q.sql, *q.args(params))
        for row in claimed:
            marked, sent = mark(self.d, profile_id, row["session_id"])
            await self.conn.execute(marked.sql, *marked.args(sent))
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        q, params = enqueue(self.d, view_id, session_id, profile, now_ms)
        queued = await self.conn.fetchrow(q.sql, *q.args(params))
        ack, which = steps.ack_deleted(self.d, queued["id"], queued["through"])
        return bool(await self.conn.execute(ack.sql, *ack.args(which)) == "DELETE 1")

    async def fill_ledger(
        self, profile_id: str, floor: int, rows: list[tuple[str, int]], *, analyze: bool = True
    ) -> None:
        """The scope and its entries, all sent, by COPY: the fastest way in, and untimed; then
        ANALYZE, or (`analyze=False`) no statistics until the end, as right after a bulk load
        (autovacuum is off for the table: the database is the bench's scratch one)."""
        if not analyze:
            await self.conn.execute("ALTER TABLE relay_started SET (autovacuum_enabled = false)")
        (q, params), _ = steps.merge_ledger(self.d, StartedScope(profile_id, floor))
        await self.conn.execute(q.sql, *q.args(params))
        await self.conn.copy_records_to_table(
            "relay_started",
            records=[(profile_id, sid, at, True) for sid, at in rows],
            columns=["profile_id", "session_id", "started_at", "sent"],
        )
        if analyze:
            await self.conn.execute("ANALYZE relay_started")

    async def close(self) -> None:
        await self.conn.close()


Raw = SqliteRaw | PostgresRaw
