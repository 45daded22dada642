"""`SqlBackend`: the store's `Backend` on SQLite or Postgres, one runner under every hook.

Each hook is one function of its aggregate's module (`registration`, `revisions`, `ledger`,
`outbox`, `presence`, `runs`, `passes`, `transfer`), called with the runner and the request.
`Store(await SqlBackend.open(target))` is a SQL store; `relay.store.open_store` makes one by URL.
"""

from __future__ import annotations

from relay.store.backend import (
    Backend,
    Binding,
    Claim,
    Deletion,
    PresenceUpdate,
    Reading,
    Rekeyed,
    RunSync,
    Sightings,
    StartedClaim,
    ViewQuery,
)
from relay.store.records import (
    Backlog,
    DeletedView,
    PresenceLease,
    RelayConfig,
    RunState,
    StartedEntry,
    StartedScope,
    StateBatch,
)
from relay.store.sql import (
    backlog,
    ledger,
    migrate,
    outbox,
    passes,
    presence,
    registration,
    revisions,
    runs,
    transfer,
)
from relay.store.sql.drivers.runner import Runner, Stats
from relay.store.sql.drivers.sqlite import SqliteRunner, create_private
from relay.store.sql.schema_state import ensure_sqlite_schema, schema_revision, unwritable
from relay.store.url import StoreTarget


def stats_of(store: object) -> Stats | None:
    """What the SQL backend under `store` has sent so far; None for a store on another one."""
    backend = getattr(store, "engine", None)
    return backend.stats if isinstance(backend, SqlBackend) else None


class SqlBackend(Backend):
    """Relay state in SQL tables; open with `await SqlBackend.open(target)`."""

    def __init__(self, runner: Runner, display_url: str) -> None:
        self._db = runner
        self._display_url = display_url

    @classmethod
    async def open(cls, target: StoreTarget, *, read_only: bool = False) -> SqlBackend:
        """Connect; migrate an embedded SQLite file, but require Postgres to be migrated already
        (to head, or to a revision with head's tables: `migrate.runnable`).

        `read_only` (SQLite): create, migrate and write nothing, so a read-only file can be read.
        """
        runner: Runner
        if target.backend == "postgres":
            from relay.store.sql.drivers.postgres import (
                PostgresRunner,  # asyncpg: Postgres stores only
            )

            runner = await PostgresRunner.open(target.sqlalchemy_url, target.display)
        else:
            assert target.path is not None
            if not read_only:
                try:
                    create_private(target.path)
                except OSError as exc:
                    raise migrate.file_error(exc, target) from exc
            runner = await SqliteRunner.open(target.path, target.display, read_only=read_only)
        try:
            current = await schema_revision(runner)
            if current != migrate.head_revision():
                if target.backend == "sqlite" and not read_only:
                    assert target.path is not None
                    await ensure_sqlite_schema(target.path)
                elif not migrate.runnable(current):
                    raise migrate.schema_error(current)
        except BaseException:
            await runner.close()
            raise
        return cls(runner, target.display)

    @property
    def name(self) -> str:
        return self._db.dialect.name

    @property
    def display_url(self) -> str:
        return self._display_url

    @property
    def runner(self) -> Runner:
        """The runner every hook uses (tests and the bench look at it)."""
        return self._db

    @property
    def stats(self) -> Stats:
        """Transactions and statements sent so far."""
        return self._db.stats

    async def schema_revision(self) -> str | None:
        return await schema_revision(self._db)

    async def unwritable(self) -> str | None:
        return await unwritable(self._db)

    async def close(self) -> None:
        await self._db.close()

    # ── registration and keys ─────────────────────────────────────────────────

    async def load_config(self) -> RelayConfig | None:
        return await registration.load_config(self._db)

    async def save_config(self, config: RelayConfig, expected_generation: int | None) -> None:
        await registration.save_config(self._db, config, expected_generation)

    async def save_key(self, key_id: str, pem: str) -> str:
        return await registration.save_key(self._db, key_id, pem)

    async def load_key(self, ref: str) -> str | None:
        return await registration.load_key(self._db, ref)

    async def delete_key(self, ref: str) -> bool:
        return await registration.delete_key(self._db, ref)

    async def rekey(self, rekeyed: Rekeyed) -> int:
        return await registration.rekey(self._db, rekeyed)

    async def profile_identity(self, profile: str) -> str | None:
        return await registration.profile_identity(self._db, profile)

    async def mint_identity(self, profile: str, minted: str) -> str:
        return await registration.mint_identity(self._db, profile, minted)

    async def forget_identity(self, profile: str) -> None:
        await registration.forget_identity(self._db, profile)

    async def identities(self) -> dict[str, str]:
        return await registration.identities(self._db)

    # ── revisions ─────────────────────────────────────────────────────────────

    async def allocate_revisions(self, count: int, now_ms: int) -> int | None:
        return await revisions.allocate_revisions(self._db, count, now_ms)

    async def revision_floor(self) -> int:
        return await revisions.revision_floor(self._db)

    # ── started ledger ────────────────────────────────────────────────────────

    async def track_started(self, profile_ids: tuple[str, ...], now_ms: int) -> None:
        await ledger.track_started(self._db, profile_ids, now_ms)

    async def record_started(self, sightings: Sightings) -> None:
        await ledger.record_started(self._db, sightings)

    async def claim_started(self, request: StartedClaim) -> list[StartedEntry]:
        return await ledger.claim_started(self._db, request)

    async def started_ledger(self) -> list[StartedScope]:
        return await ledger.started_ledger(self._db)

    # ── deleted outbox ────────────────────────────────────────────────────────

    async def enqueue_deleted(self, deletion: Deletion) -> DeletedView:
        return await outbox.enqueue_deleted(self._db, deletion)

    async def bind_deleted(self, binding: Binding) -> int:
        return await outbox.bind_deleted(self._db, binding)

    async def pending_deleted(self) -> list[DeletedView]:
        return await outbox.pending_deleted(self._db)

    async def backlog(self) -> Backlog:
        return await backlog.backlog(self._db)

    async def claim_deleted(self, claim: Claim) -> list[DeletedView]:
        return await outbox.claim_deleted(self._db, claim)

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        return await outbox.ack_deleted(self._db, view_id, through)

    # ── presence ──────────────────────────────────────────────────────────────

    async def apply_presence(self, update: PresenceUpdate) -> bool:
        return await presence.apply_presence(self._db, update)

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        return await presence.presence_active(self._db, profile, now_ms)

    async def presence_leases(self) -> list[PresenceLease]:
        return await presence.presence_leases(self._db)

    # ── runs and passes ───────────────────────────────────────────────────────

    async def keep_alive(self, claim: Claim) -> int | None:
        return await runs.keep_alive(self._db, claim)

    async def release_runs(self, owner: str) -> None:
        await runs.release_runs(self._db, owner)

    async def run_states(self) -> list[RunState]:
        return await runs.run_states(self._db)

    async def pass_view(self, query: ViewQuery) -> Reading:
        return await passes.pass_view(self._db, query)

    async def pass_write(self, sync: RunSync) -> tuple[list[RunState], int] | None:
        return await passes.pass_write(self._db, sync)

    # ── transfer ──────────────────────────────────────────────────────────────

    async def merge_state(self, batch: StateBatch) -> None:
        await transfer.merge_state(self._db, batch)
