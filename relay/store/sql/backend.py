"""`SqlBackend`: the store's `Backend` on SQLite or Postgres, a table of hooks (`hook`), each one
function of its aggregate's module called with the backend's runner (docs/design.md)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from relay.store.backend import Backend, Claim, RunSync
from relay.store.fleet import FleetMember
from relay.store.records import RunState
from relay.store.sql import backlog as backlogs
from relay.store.sql import (
    compat,
    fleet,
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
from relay.store.sql.compat import COMPAT_SINCE, reached, schema_standing
from relay.store.sql.drivers.runner import Runner
from relay.store.sql.schema import HEAD_REVISION
from relay.store.url import StoreTarget

P = ParamSpec("P")
T = TypeVar("T")
Hook = Callable[Concatenate["SqlBackend", P], Coroutine[Any, Any, T]]


def hook(function: Callable[Concatenate[Runner, P], Coroutine[Any, Any, T]]) -> Hook[P, T]:
    """`function(runner, …)` as a method: typed through, with no frame of its own to await."""

    def method(self: SqlBackend, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
        return function(self.runner, *args, **kwargs)

    method.__name__ = method.__qualname__ = function.__name__
    method.__doc__ = function.__doc__
    return method


class SqlBackend:
    """Relay state in SQL tables; open with `await SqlBackend.open(target)`."""

    def __init__(
        self, runner: Runner, display_url: str, revision: str | None = HEAD_REVISION
    ) -> None:
        self.runner = runner  # every hook's (tests and the bench look at it)
        self.display_url = display_url
        self.name = runner.dialect.name
        self.stats = runner.stats  # transactions and statements sent so far
        # A deploy yet to migrate: below 0007 there is no fleet table (record nothing); below
        # 0009 its rows have no clock offset and passes (write and read them without); below
        # 0011 run rows have no `taken_from` (a takeover's failed then stays).
        self._fleet = reached(revision, COMPAT_SINCE)
        self._ring = reached(revision, fleet.RING_SINCE)
        self._taken = reached(revision, runs.TAKEN_FROM_SINCE)

    @classmethod
    async def open(cls, target: StoreTarget, *, read_only: bool = False) -> SqlBackend:
        """Connect; migrate an embedded SQLite file, but require Postgres to be `Standing.runnable`
        already (else a `SchemaError` says what it needs). `read_only` (SQLite): create, migrate
        and write nothing, so a read-only file can be read."""
        runner = await migrate.open_runner(target, read_only=read_only)
        try:
            standing = await schema_standing(runner)
            current = standing.current
            if standing.below and target.backend == "sqlite" and not read_only:
                assert target.path is not None
                await migrate.ensure_sqlite_schema(target.path)
                current = HEAD_REVISION
            elif not standing.runnable:
                raise standing.error(target)
        except BaseException:
            await runner.close()
            raise
        return cls(runner, target.display, current)

    def bound_waits(self, seconds: float) -> None:
        self.runner.bound_waits(seconds)

    async def close(self) -> None:
        await self.runner.close()

    schema_revision = hook(compat.schema_revision)
    unwritable = hook(compat.unwritable)
    clock_ms = hook(passes.clock_ms)

    load_config = hook(registration.load_config)
    save_config = hook(registration.save_config)
    forget_config = hook(registration.forget_config)
    save_key = hook(registration.save_key)
    load_key = hook(registration.load_key)
    delete_key = hook(registration.delete_key)
    rekey = hook(registration.rekey)
    profile_identity = hook(registration.profile_identity)
    mint_identity = hook(registration.mint_identity)
    forget_identity = hook(registration.forget_identity)
    identities = hook(registration.identities)

    allocate_revisions = hook(revisions.allocate_revisions)
    revision_floor = hook(revisions.revision_floor)

    track_started = hook(ledger.track_started)
    record_started = hook(ledger.record_started)
    claim_started = hook(ledger.claim_started)
    started_ledger = hook(ledger.started_ledger)

    enqueue_deleted = hook(outbox.enqueue_deleted)
    bind_deleted = hook(outbox.bind_deleted)
    pending_deleted = hook(outbox.pending_deleted)
    backlog = hook(backlogs.backlog)
    claim_deleted = hook(outbox.claim_deleted)
    ack_deleted = hook(outbox.ack_deleted)

    apply_presence = hook(presence.apply_presence)
    presence_active = hook(presence.presence_active)
    presence_leases = hook(presence.presence_leases)

    release_runs = hook(runs.release_runs)
    retire_runs = hook(runs.retire_runs)
    pass_view = hook(passes.pass_view)

    merge_state = hook(transfer.merge_state)

    # The hooks that also carry this replica's fleet row (none below 0007) or taken_from.

    async def keep_alive(self, claim: Claim) -> int | None:
        return await runs.keep_alive(self.runner, claim, fleet=self._fleet)

    async def pass_write(self, sync: RunSync) -> tuple[list[RunState], int] | None:
        if not self._fleet:
            sync = replace(sync, member=None)
        return await passes.pass_write(self.runner, sync, ring=self._ring, taken=self._taken)

    async def run_states(self) -> list[RunState]:
        return await runs.run_states(self.runner, taken=self._taken)

    async def record_member(self, member: FleetMember) -> None:
        if self._fleet:
            await fleet.record_member(self.runner, member, ring=self._ring)

    async def fleet(self) -> list[FleetMember]:
        return await fleet.members(self.runner, ring=self._ring) if self._fleet else []


# mypy proves here that `SqlBackend` is a `Backend`, hook by hook.
_CONFORMS: type[Backend] = SqlBackend
