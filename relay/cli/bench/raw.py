"""The raw drivers running the store's own statements, with nothing of the store around them.

The SQL text and parameter order are the store's compiled statements (`statements(d)` of each
aggregate in `relay.store.sql`), so the two sides cannot drift apart; the raw side makes the same
transactions and round trips, on one connection, without the gate's checks, the pool, the runner
or records. SQLite runs on the calling thread, on a connection the store's own `connect` opened
(WAL, synchronous=FULL, busy timeout); Postgres on one asyncpg connection, with asyncpg's default
prepared-statement cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.protocol import STARTED_WINDOW_MS
from relay.store.sql import ledger, outbox, registration, revisions, transfer
from relay.store.sql.dialect import POSTGRES, SQLITE, Compiled, Dialect
from relay.store.sql.sqlite import BUSY_TIMEOUT_S, connect

Step = tuple[Compiled, Mapping[str, Any]]


class Statements:
    """The store statements the workloads run, for one dialect."""

    def __init__(self, d: Dialect) -> None:
        self.revisions = revisions.statements(d)
        self.registration = registration.statements(d)
        self.ledger = ledger.statements(d)
        self.outbox = outbox.statements(d)
        self.transfer = transfer.statements(d)


def record_steps(
    q: ledger.Statements, profile_id: str, session_id: str, at: int, now_ms: int
) -> list[Step]:
    """One sighting, as the store's ledger hook records it (its cutoff read by the statements)."""
    scope, window = {"profile_id": profile_id}, now_ms - STARTED_WINDOW_MS
    return [
        (q.add_scope, {**scope, "floor": now_ms}),
        (q.prune, {**scope, "window": window}),
        (q.add_entry, {**scope, "session_id": session_id, "started_at": at, "window": window}),
    ]


def allocate_params(count: int, now_ms: int) -> dict[str, int]:
    """`first` is what the store's revisions hook computes before its upsert."""
    return {"first": max(1, now_ms) + count - 1, "now": now_ms, "count": count}


def claim_params(profile_id: str, owner: str, now_ms: int, lease_ms: int) -> dict[str, Any]:
    """A claim of one entry, as the gate hands it to the ledger hook."""
    return {
        "profile_id": profile_id,
        "owner": owner,
        "now": now_ms,
        "until": now_ms + lease_ms,
        "limit": 1,
    }


def deleted_row(view_id: str, session_id: str, profile: str, through: int) -> dict[str, Any]:
    """An unbound outbox entry, as the store's enqueue binds it."""
    unbound = ("identity", "scope_url", "scope_publisher_id", "scope_profile_id")
    return {"id": view_id, "session_id": session_id, "profile": profile, "through": through} | {
        column: None for column in unbound
    }


class SqliteRaw:
    """sqlite3 as the store's writer uses it: every write in `BEGIN IMMEDIATE` … `COMMIT`."""

    def __init__(self, path: Path) -> None:
        self.q = Statements(SQLITE)
        self.conn = connect(path, busy_timeout_s=BUSY_TIMEOUT_S)

    def _write(self, *steps: Step) -> list[list[Any]]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            rows = [self.conn.execute(q.sql, q.args(p)).fetchall() for q, p in steps]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return rows

    def _scalar(self, q: Compiled, params: Mapping[str, Any]) -> Any:
        row = self.conn.execute(q.sql, q.args(params)).fetchone()
        return None if row is None else row[0]

    async def allocate(self, count: int, now_ms: int) -> int:
        args = allocate_params(count, now_ms)
        return int(self._write((self.q.revisions.allocate, args))[0][0][0])

    async def identity(self, profile: str) -> str | None:
        found = self._scalar(self.q.registration.identity, {"profile": profile})
        return None if found is None else str(found)

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        self._write(*record_steps(self.q.ledger, profile_id, session_id, at, now_ms))

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        q = self.q.ledger
        claim = claim_params(profile_id, owner, now_ms, lease_ms)
        claimed = self._write((q.claim, claim))[0]
        for row in claimed:
            self._write((q.mark_sent, {"profile_id": profile_id, "session_id": row[1]}))
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        q = self.q.outbox
        row = deleted_row(view_id, session_id, profile, now_ms)
        queued = self._write((q.enqueue_live, row))[0][0]
        self.conn.execute("BEGIN IMMEDIATE")
        removed = self.conn.execute(q.ack.sql, q.ack.args({"id": queued[0], "through": queued[3]}))
        self.conn.execute("COMMIT")
        return bool(removed.rowcount == 1)

    async def fill_ledger(
        self, profile_id: str, floor: int, rows: list[tuple[str, int]], *, analyze: bool = True
    ) -> None:
        """The scope and its entries, all sent, in one transaction (the merge's statements);
        SQLite keeps no statistics unless asked (`analyze` is for Postgres)."""
        q = self.q.transfer
        entries = [
            q.entry.args(
                {"profile_id": profile_id, "session_id": sid, "started_at": at, "sent": True}
            )
            for sid, at in rows
        ]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(q.scope.sql, q.scope.args({"profile_id": profile_id, "floor": floor}))
        self.conn.executemany(q.entry.sql, entries)
        self.conn.execute("COMMIT")

    async def close(self) -> None:
        self.conn.close()


class PostgresRaw:
    """One asyncpg connection: one-statement calls in autocommit, as the store runs them."""

    def __init__(self, conn: Any) -> None:
        self.q = Statements(POSTGRES)
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str) -> PostgresRaw:
        import asyncpg

        return cls(await asyncpg.connect(dsn, timeout=10))

    async def allocate(self, count: int, now_ms: int) -> int:
        q = self.q.revisions.allocate
        return int(await self.conn.fetchval(q.sql, *q.args(allocate_params(count, now_ms))))

    async def identity(self, profile: str) -> str | None:
        q = self.q.registration.identity
        found = await self.conn.fetchval(q.sql, *q.args({"profile": profile}))
        return None if found is None else str(found)

    async def record_started(self, profile_id: str, session_id: str, at: int, now_ms: int) -> None:
        async with self.conn.transaction():
            for q, params in record_steps(self.q.ledger, profile_id, session_id, at, now_ms):
                await self.conn.execute(q.sql, *q.args(params))

    async def claim_mark(self, profile_id: str, owner: str, now_ms: int, lease_ms: int) -> int:
        q = self.q.ledger
        claim = claim_params(profile_id, owner, now_ms, lease_ms)
        claimed = await self.conn.fetch(q.claim.sql, *q.claim.args(claim))
        for row in claimed:
            mark = {"profile_id": profile_id, "session_id": row["session_id"]}
            await self.conn.execute(q.mark_sent.sql, *q.mark_sent.args(mark))
        return len(claimed)

    async def enqueue_ack(self, view_id: str, session_id: str, profile: str, now_ms: int) -> bool:
        q = self.q.outbox
        row = deleted_row(view_id, session_id, profile, now_ms)
        queued = await self.conn.fetchrow(q.enqueue_live.sql, *q.enqueue_live.args(row))
        ack = {"id": queued["id"], "through": queued["through"]}
        return bool(await self.conn.execute(q.ack.sql, *q.ack.args(ack)) == "DELETE 1")

    async def fill_ledger(
        self, profile_id: str, floor: int, rows: list[tuple[str, int]], *, analyze: bool = True
    ) -> None:
        """The scope and its entries, all sent, by COPY: the fastest way in, and untimed; then
        ANALYZE, or (`analyze=False`) no statistics until the end, as right after a bulk load
        (autovacuum is off for the table: the database is the bench's scratch one)."""
        if not analyze:
            await self.conn.execute("ALTER TABLE relay_started SET (autovacuum_enabled = false)")
        q = self.q.transfer.scope
        await self.conn.execute(q.sql, *q.args({"profile_id": profile_id, "floor": floor}))
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
