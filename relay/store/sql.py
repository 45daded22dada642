"""`RelayStore` on SQL: one implementation for SQLite and Postgres (SQLAlchemy Core).

Every method is one transaction whose body is a plain function of a `Connection`, written once.
Where it runs differs by dialect, and that is the only dialect split besides a few functions:

- SQLite: the whole transaction runs in one hop to the store's own thread, on the sync driver, so
  a method costs one thread switch however many statements it has. Writes start `BEGIN IMMEDIATE`.
- Postgres: the body runs on asyncpg through `run_sync`. Rows a method changes are taken with
  `FOR UPDATE` or changed by a single atomic statement; a method that is one statement runs in
  autocommit, one round trip with no BEGIN/COMMIT.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    delete,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError, StoreError
from relay.store import migrate
from relay.store import schema as t
from relay.store.base import (
    CONFIG_VERSION,
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayConfig,
    RelayStore,
    StartedEntry,
    StartedScope,
    StateBatch,
    checked_batch,
    checked_claim,
    checked_config,
    checked_deletion,
    checked_key,
    checked_lease,
    checked_name,
    checked_scope,
    checked_time,
    config_problem,
    is_identity,
    new_sightings,
    started_cutoff,
)
from relay.store.engines import WRITE, postgres_engine, sqlite_engine
from relay.store.url import StoreTarget, driver_error

T = TypeVar("T")
Body = Callable[[Connection], T]


class SqlStore(RelayStore):
    """Relay state in SQL tables; open with `await SqlStore.open(target)`."""

    def __init__(self, target: StoreTarget) -> None:
        self._target = target
        self._postgres = target.backend == "postgres"
        self._insert = postgresql.insert if self._postgres else sqlite.insert
        self._sqlite: Engine | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._pool: AsyncEngine | None = None

    @classmethod
    async def open(cls, target: StoreTarget) -> SqlStore:
        """Connect; migrate an embedded SQLite file, but require Postgres to be at head already."""
        store = cls(target)
        try:
            if store._postgres:
                store._pool = postgres_engine(target.sqlalchemy_url)
                current = await store._run(migrate.current_revision, single=True)
                if current != migrate.head_revision():
                    raise migrate.schema_error(current)
            else:
                assert target.path is not None
                store._thread = ThreadPoolExecutor(1, thread_name_prefix="relay-sqlite")
                store._sqlite = await store._in_thread(sqlite_engine, target.path)
                await store._run(store._migrate_sqlite, write=True)
        except BaseException:
            await store.close()
            raise
        return store

    @staticmethod
    def _migrate_sqlite(conn: Connection) -> None:
        # Inside BEGIN IMMEDIATE: processes opening one new file at once migrate it in turn.
        if migrate.current_revision(conn) != migrate.head_revision():
            migrate.upgrade_locked(conn)

    @property
    def display_url(self) -> str:
        return self._target.display

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.dispose()
        if self._thread is not None:
            thread, self._thread = self._thread, None
            if self._sqlite is not None:
                await asyncio.get_running_loop().run_in_executor(thread, self._sqlite.dispose)
                self._sqlite = None
            thread.shutdown(wait=False)

    # ── running one transaction ───────────────────────────────────────────────

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._thread is None:
            raise StoreError(f"the store {self.display_url} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _run(self, body: Body[T], *, write: bool = False, single: bool = False) -> T:
        """Run `body` as one transaction; `single` marks a body of one statement."""
        try:
            if self._postgres:
                return await self._run_postgres(body, single)
            return await self._in_thread(self._run_sqlite, body, write)
        except (DBAPIError, OSError, TimeoutError) as exc:
            raise driver_error(exc, self._target) from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"relay store {self.display_url} failed: {exc}") from exc

    def _run_sqlite(self, body: Body[T], write: bool) -> T:
        # A cancelled caller does not stop this thread: the transaction still ends, never half-done.
        assert self._sqlite is not None
        with self._sqlite.connect() as conn:
            conn.execution_options(**{WRITE: write})
            with conn.begin():
                return body(conn)

    async def _run_postgres(self, body: Body[T], single: bool) -> T:
        if self._pool is None:
            raise StoreError(f"the store {self.display_url} is closed")
        conn = await self._pool.connect()
        try:
            if single:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            result = await conn.run_sync(body)
            if not single:
                await _finish(conn.commit())
        except asyncio.CancelledError:
            # The server may still hold this transaction's row locks: drop the connection.
            await _finish(conn.invalidate())
            raise
        finally:
            await _finish(conn.close())
        return result

    # ── registration and key ──────────────────────────────────────────────────

    async def load_config(self) -> RelayConfig | None:
        # One statement, so a concurrent save is seen whole or not at all (Postgres reads each
        # statement of a READ COMMITTED transaction at its own snapshot).
        query = select(
            t.config, t.profiles.c.profile, t.profiles.c.identity, t.profiles.c.profile_id
        ).select_from(t.config.outerjoin(t.profiles, true()))
        rows = await self._run(lambda conn: conn.execute(query).all(), single=True)
        if not rows or rows[0].version != CONFIG_VERSION:
            return None
        row = rows[0]
        grants = {r.profile: ProfileGrant(r.identity, r.profile_id) for r in rows if r.profile}
        problem = config_problem(row.url, row.publisher_id, row.key_id, row.key_ref, grants)
        if problem:
            raise CorruptStateError(f"saved relay configuration is invalid: {problem}")
        return RelayConfig(
            row.url, row.publisher_id, row.key_id, row.key_ref, grants, row.generation
        )

    async def save_config(
        self, config: RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        checked_config(config)
        values = {
            "url": config.url,
            "publisher_id": config.publisher_id,
            "key_id": config.key_id,
            "key_ref": config.key_ref,
            "version": CONFIG_VERSION,
        }
        grants = [
            {"profile": name, "identity": grant.identity, "profile_id": grant.profile_id}
            for name, grant in config.profiles.items()
        ]

        def body(conn: Connection) -> None:
            if (
                conn.execute(select(t.keys.c.ref).where(t.keys.c.ref == config.key_ref)).first()
                is None
            ):
                raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
            stored = conn.execute(select(t.config.c.version, t.config.c.generation)).first()
            # What `load_config` shows: a registration of another version counts as none.
            shown = stored.generation if stored and stored.version == CONFIG_VERSION else 0
            now = int(time.time() * 1000)
            upsert = self._insert(t.config).values(id=1, generation=1, updated_at=now, **values)
            # Locks the singleton row first, so concurrent saves replace the profile map in turn.
            generation = conn.execute(
                upsert.on_conflict_do_update(
                    index_elements=[t.config.c.id],
                    set_={**values, "generation": t.config.c.generation + 1, "updated_at": now},
                ).returning(t.config.c.generation)
            ).scalar_one()
            # A save that committed between our read and our upsert shows in the generation.
            raced = generation != (stored.generation if stored else 0) + 1
            if expected_generation is not None and (raced or shown != expected_generation):
                raise StaleConfigError("the relay registration changed since it was read")
            conn.execute(delete(t.profiles))
            conn.execute(t.profiles.insert(), grants)

        await self._run(body, write=True)

    async def save_key(self, key_id: str, pem: str) -> str:
        checked_name("key_id", key_id)
        checked_key(pem)
        ref = hashlib.sha256(key_id.encode()).hexdigest()[:16]
        statement = self._insert(t.keys).values(ref=ref, pem=pem, encrypted=False)
        statement = statement.on_conflict_do_update(
            index_elements=[t.keys.c.ref], set_={"pem": pem, "encrypted": False}
        )
        await self._run(lambda conn: conn.execute(statement), write=True, single=True)
        return ref

    async def load_key(self, ref: str) -> str:
        checked_name("key reference", ref)
        row = await self._run(
            lambda conn: conn.execute(select(t.keys).where(t.keys.c.ref == ref)).first(),
            single=True,
        )
        if row is None:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is missing")
        if row.encrypted:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is encrypted; cannot read it")
        return str(row.pem)

    # ── profile identities ────────────────────────────────────────────────────

    async def profile_identity(self, profile: str) -> str:
        checked_name("profile", profile)
        query = select(t.identities.c.identity).where(t.identities.c.profile == profile)
        identity = await self._run(lambda conn: conn.execute(query).scalar(), single=True)
        if identity is None:
            minted = f"pfi_{uuid.uuid4().hex}"
            mint = self._insert(t.identities).values(profile=profile, identity=minted)

            def body(conn: Connection) -> Any:
                # The loser of a race inserts nothing and reads the winner's value.
                conn.execute(mint.on_conflict_do_nothing(index_elements=[t.identities.c.profile]))
                return conn.execute(query).scalar_one()

            identity = await self._run(body, write=True)
        if not is_identity(identity):
            raise CorruptStateError("invalid Talaria Relay profile identity")
        return identity

    async def forget_profile_identity(self, profile: str) -> None:
        checked_name("profile", profile)
        statement = delete(t.identities).where(t.identities.c.profile == profile)
        await self._run(lambda conn: conn.execute(statement), write=True, single=True)

    # ── revisions ─────────────────────────────────────────────────────────────

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        checked_time("now_ms", now_ms)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError("count must be a non-negative integer")
        if count == 0:
            return []
        floor = func.coalesce(t.revision.c.floor, 0)
        statement = (
            self._insert(t.revision)
            .values(id=1, floor=max(1, now_ms) + count - 1)
            .on_conflict_do_update(
                index_elements=[t.revision.c.id],
                set_={"floor": self._greatest(floor + 1, now_ms) + (count - 1)},
            )
            .returning(t.revision.c.floor)
        )
        last = await self._run(
            lambda conn: int(conn.execute(statement).scalar_one()), write=True, single=True
        )
        return list(range(last - count + 1, last + 1))

    async def revision_floor(self) -> int:
        floor = await self._run(
            lambda conn: conn.execute(select(t.revision.c.floor)).scalar(), single=True
        )
        return max(0, floor or 0)

    # ── session-started ledger ────────────────────────────────────────────────

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        checked_time("now_ms", now_ms)
        rows = [{"profile_id": checked_name("profile_id", p), "floor": now_ms} for p in profile_ids]
        if not rows:
            return
        statement = self._insert(t.started_scopes).on_conflict_do_nothing(
            index_elements=[t.started_scopes.c.profile_id]
        )
        await self._run(lambda conn: conn.execute(statement, rows), write=True)

    async def record_started(
        self, profile_id: str, seen: Iterable[tuple[str, int]], now_ms: int
    ) -> None:
        checked_name("profile_id", profile_id)
        checked_time("now_ms", now_ms)
        sightings = list(seen)
        scope = t.started_scopes.c.profile_id == profile_id
        in_scope = t.started.c.profile_id == profile_id

        def body(conn: Connection) -> None:
            floor = conn.execute(select(t.started_scopes.c.floor).where(scope)).scalar()
            if floor is None:
                conn.execute(
                    self._insert(t.started_scopes)
                    .values(profile_id=profile_id, floor=now_ms)
                    .on_conflict_do_nothing(index_elements=[t.started_scopes.c.profile_id])
                )
                floor = conn.execute(select(t.started_scopes.c.floor).where(scope)).scalar_one()
            cutoff = started_cutoff(floor, now_ms)
            conn.execute(delete(t.started).where(in_scope, t.started.c.started_at < cutoff))
            fresh = new_sightings(sightings, cutoff)
            if not fresh:
                return
            known = set(conn.execute(select(t.started.c.session_id).where(in_scope)).scalars())
            rows = [
                {"profile_id": profile_id, "session_id": sid, "started_at": at, "sent": False}
                for sid, at in fresh.items()
                if sid not in known
            ]
            if rows:
                conn.execute(self._insert(t.started).on_conflict_do_nothing(), rows)

        await self._run(body, write=True)

    async def claim_started(
        self, profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[StartedEntry]:
        checked_claim(profile_id, owner, now_ms, lease_ms, limit)
        s = t.started.c
        claimable = (
            select(s.session_id)
            .where(
                s.profile_id == profile_id,
                s.sent == false(),
                or_(s.claimed_until.is_(None), s.claimed_until <= now_ms, s.claimed_by == owner),
            )
            .order_by(s.started_at, s.session_id)
            .limit(limit)
            # Concurrent claimers pass over each other's rows instead of queueing (no-op on SQLite).
            .with_for_update(skip_locked=True)
            # Chosen once: as a plain subquery Postgres may rescan it per row, past the limit.
            .cte("claimable")
            .prefix_with("MATERIALIZED")
        )
        statement = (
            update(t.started)
            .where(s.profile_id == profile_id, s.session_id.in_(select(claimable.c.session_id)))
            .values(claimed_by=owner, claimed_until=now_ms + lease_ms)
            .returning(*t.started.c)
        )
        rows = await self._run(lambda conn: conn.execute(statement).all(), write=True, single=True)
        return sorted((_started(row) for row in rows), key=lambda e: (e.started_at, e.session_id))

    async def mark_started_sent(self, profile_id: str, session_id: str) -> None:
        checked_name("profile_id", profile_id)
        checked_name("session_id", session_id)
        statement = (
            update(t.started)
            .where(t.started.c.profile_id == profile_id, t.started.c.session_id == session_id)
            .values(sent=True, claimed_by=None, claimed_until=None)
        )
        await self._run(lambda conn: conn.execute(statement), write=True, single=True)

    async def started_ledger(self) -> list[StartedScope]:
        scopes, s = t.started_scopes, t.started.c
        query = (
            select(scopes.c.profile_id, scopes.c.floor, t.started)
            .select_from(scopes.outerjoin(t.started, s.profile_id == scopes.c.profile_id))
            .order_by(scopes.c.profile_id, s.started_at, s.session_id)
        )
        rows = await self._run(lambda conn: conn.execute(query).all(), single=True)
        floors: dict[str, int] = {}
        entries: dict[str, list[StartedEntry]] = {}
        for row in rows:
            floors[row[0]] = row.floor
            if row.session_id is not None:
                entries.setdefault(row[0], []).append(_started(row))
        return [
            StartedScope(pid, floor, tuple(entries.get(pid, ()))) for pid, floor in floors.items()
        ]

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def enqueue_deleted(
        self,
        session_id: str,
        profile: str,
        now_ms: int,
        *,
        session_live: bool,
        identity: str | None,
        scope: DeletedScope | None,
    ) -> DeletedView:
        checked_deletion(session_id, profile, now_ms, identity, scope)
        d = t.deleted.c
        insert = self._insert(t.deleted).values(
            id=str(uuid.uuid4()),
            session_id=session_id,
            profile=profile,
            through=now_ms,
            identity=identity,
            scope_url=scope.url if scope else None,
            scope_publisher_id=scope.publisher_id if scope else None,
            scope_profile_id=scope.profile_id if scope else None,
        )
        # A queued entry keeps its id and binding; a session that still has data pushes its
        # `through` forward so the acknowledgement covers runs that finished since.
        through = self._greatest(d.through, insert.excluded.through) if session_live else d.through
        statement = insert.on_conflict_do_update(
            index_elements=[d.session_id, d.profile], set_={"through": through}
        ).returning(*t.deleted.c)
        row = await self._run(lambda conn: conn.execute(statement).one(), write=True, single=True)
        return _deleted(row)

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        checked_name("profile", profile)
        checked_name("identity", identity)
        checked_scope(scope)
        d = t.deleted.c
        statement = (
            update(t.deleted)
            .where(
                d.profile == profile,
                d.scope_url.is_(None),
                or_(d.identity.is_(None), d.identity == identity),
            )
            .values(
                identity=identity,
                scope_url=scope.url,
                scope_publisher_id=scope.publisher_id,
                scope_profile_id=scope.profile_id,
            )
        )
        return await self._run(
            lambda conn: conn.execute(statement).rowcount, write=True, single=True
        )

    async def pending_deleted(self) -> list[DeletedView]:
        statement = select(t.deleted).order_by(t.deleted.c.through, t.deleted.c.id)
        rows = await self._run(lambda conn: conn.execute(statement).all(), single=True)
        return [_deleted(row) for row in rows]

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        checked_name("view id", view_id)
        checked_time("through", through)
        statement = delete(t.deleted).where(
            t.deleted.c.id == view_id, t.deleted.c.through == through
        )
        removed = await self._run(
            lambda conn: conn.execute(statement).rowcount, write=True, single=True
        )
        return bool(removed)

    # ── presence leases ───────────────────────────────────────────────────────

    async def apply_presence(
        self,
        profile: str,
        tab_id: str,
        seq: int,
        active: bool,
        now_ms: int,
        *,
        lease_ms: int,
        fence_ms: int,
        max_tabs: int,
    ) -> bool:
        checked_lease(profile, tab_id, seq, active, now_ms, lease_ms, fence_ms, max_tabs)
        p = t.presence.c
        values = {
            "seq": seq,
            "active": active,
            "expires_at": now_ms + lease_ms,
            "updated_at": now_ms,
        }
        insert = self._insert(t.presence).values(profile=profile, tab_id=tab_id, **values)
        upsert = insert.on_conflict_do_update(
            index_elements=[p.profile, p.tab_id],
            set_=values,
            # The sequence fence: a stale or replayed update changes nothing.
            where=p.seq < insert.excluded.seq,
        ).returning(p.seq)

        def body(conn: Connection) -> bool:
            conn.execute(delete(t.presence).where(p.expires_at + fence_ms <= now_ms))
            if conn.execute(upsert).first() is None:
                return False
            total = conn.execute(select(func.count()).select_from(t.presence)).scalar_one()
            if total > max_tabs:
                oldest = (
                    select(p.profile, p.tab_id)
                    .where(not_(and_(p.profile == profile, p.tab_id == tab_id)))
                    .order_by(p.updated_at, p.profile, p.tab_id)
                    .limit(total - max_tabs)
                )
                conn.execute(delete(t.presence).where(tuple_(p.profile, p.tab_id).in_(oldest)))
            return True

        return await self._run(body, write=True)

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        checked_name("profile", profile)
        checked_time("now_ms", now_ms)
        p = t.presence.c
        query = select(
            exists().where(p.profile == profile, p.active == true(), p.expires_at > now_ms)
        )
        return bool(await self._run(lambda conn: conn.execute(query).scalar(), single=True))

    async def presence_leases(self) -> list[PresenceLease]:
        p = t.presence.c
        query = select(t.presence).order_by(p.updated_at.desc(), p.profile, p.tab_id)
        rows = await self._run(lambda conn: conn.execute(query).all(), single=True)
        return [
            PresenceLease(r.profile, r.tab_id, r.seq, r.active, r.expires_at, r.updated_at)
            for r in rows
        ]

    # ── copying between stores ────────────────────────────────────────────────

    async def identities(self) -> dict[str, str]:
        rows = await self._run(lambda conn: conn.execute(select(t.identities)).all(), single=True)
        return {row.profile: row.identity for row in rows if is_identity(row.identity)}

    async def merge_state(self, batch: StateBatch) -> None:
        checked_batch(batch)
        s, p = t.started.c, t.presence.c

        def body(conn: Connection) -> None:
            if batch.identities:
                rows = [{"profile": k, "identity": v} for k, v in batch.identities.items()]
                conn.execute(self._insert(t.identities).on_conflict_do_nothing(), rows)
            floor = self._insert(t.revision).values(id=1, floor=batch.revision_floor)
            conn.execute(
                floor.on_conflict_do_update(
                    index_elements=[t.revision.c.id],
                    set_={"floor": self._greatest(t.revision.c.floor, batch.revision_floor)},
                )
            )
            for scope in batch.started:
                upsert = self._insert(t.started_scopes).values(
                    profile_id=scope.profile_id, floor=scope.floor
                )
                lower = self._least(t.started_scopes.c.floor, upsert.excluded.floor)
                conn.execute(
                    upsert.on_conflict_do_update(
                        index_elements=[t.started_scopes.c.profile_id], set_={"floor": lower}
                    )
                )
                entries = [
                    {
                        "profile_id": e.profile_id,
                        "session_id": e.session_id,
                        "started_at": e.started_at,
                        "sent": e.sent,
                    }
                    for e in scope.entries
                ]
                if entries:
                    insert = self._insert(t.started)
                    sent = or_(s.sent, insert.excluded.sent)
                    conn.execute(
                        insert.on_conflict_do_update(
                            index_elements=[s.profile_id, s.session_id], set_={"sent": sent}
                        ),
                        entries,
                    )
            for view in batch.deleted:
                self._merge_deleted(conn, view)
            for lease in batch.presence:
                values = {
                    "seq": lease.seq,
                    "active": lease.active,
                    "expires_at": lease.expires_at,
                    "updated_at": lease.updated_at,
                }
                insert = self._insert(t.presence).values(
                    profile=lease.profile, tab_id=lease.tab_id, **values
                )
                conn.execute(
                    insert.on_conflict_do_update(
                        index_elements=[p.profile, p.tab_id],
                        set_=values,
                        where=p.seq < insert.excluded.seq,
                    )
                )

        await self._run(body, write=True)

    def _merge_deleted(self, conn: Connection, view: DeletedView) -> None:
        d = t.deleted.c
        scope = view.scope
        bound = {
            "identity": view.identity,
            "scope_url": scope.url if scope else None,
            "scope_publisher_id": scope.publisher_id if scope else None,
            "scope_profile_id": scope.profile_id if scope else None,
        }
        same = and_(d.session_id == view.session_id, d.profile == view.profile)
        # The entry already queued for this session keeps its id and any binding it has.
        existing = conn.execute(select(t.deleted).where(same)).first()
        if existing is None:
            conn.execute(
                t.deleted.insert().values(
                    id=view.id,
                    session_id=view.session_id,
                    profile=view.profile,
                    through=view.through,
                    **bound,
                )
            )
            return
        changes: dict[str, Any] = {"through": max(existing.through, view.through)}
        if existing.scope_url is None and scope is not None:
            changes |= bound
        conn.execute(update(t.deleted).where(same).values(**changes))

    # ── helpers ───────────────────────────────────────────────────────────────

    def _greatest(self, a: ColumnElement[Any], b: Any) -> ColumnElement[Any]:
        # SQLite's two-argument max() and min() are scalar: its GREATEST and LEAST.
        return func.greatest(a, b) if self._postgres else func.max(a, b)

    def _least(self, a: ColumnElement[Any], b: Any) -> ColumnElement[Any]:
        return func.least(a, b) if self._postgres else func.min(a, b)


async def _finish(step: Awaitable[Any]) -> None:
    """Run a commit, rollback or close to its end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def _started(row: Any) -> StartedEntry:
    return StartedEntry(
        row.profile_id,
        row.session_id,
        row.started_at,
        bool(row.sent),
        row.claimed_by,
        row.claimed_until,
    )


def _deleted(row: Any) -> DeletedView:
    scope = (
        DeletedScope(row.scope_url, row.scope_publisher_id, row.scope_profile_id)
        if row.scope_url is not None
        else None
    )
    return DeletedView(row.id, row.session_id, row.profile, row.through, row.identity, scope)
