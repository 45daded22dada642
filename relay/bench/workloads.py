"""The store-side workloads, each paired with its raw-driver equivalent on the same data.

Each workload runs on a store of its own, so a ledger's size is the whole store's: ledger
workloads run on one scope filled to the ledger size with sent entries that start far in the
future, so no prune ever removes them. Each batch of operations runs at a `now` one day and
an hour past the previous batch's, so the store's own 24 h prune removes what the previous batch
added and the ledger stays at its size plus one batch.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from relay.bench.raw import Raw
from relay.bench.rounds import Rounds, compare
from relay.store import RelayStore, StartedEntry, StartedScope, StateBatch

T0 = 1_800_000_000_000
BATCH_STEP_MS = 25 * 60 * 60 * 1000
FILL_START = T0 + 10**11
LEASE_MS = 60_000
OWNER = "bench"


@dataclass
class Subject:
    """One store under measurement and, for SQL stores, the raw driver on the same database."""

    store: RelayStore
    raw: Raw | None
    plan: Rounds

    def scaled(self, ledger: int) -> Rounds:
        """Fewer operations where each rewrites a whole JSON ledger."""
        if self.raw is not None or ledger <= 1_000:
            return self.plan
        return replace(self.plan, ops=max(3, self.plan.ops * 100 // ledger))


def batch_now(batch: int) -> int:
    return T0 + batch * BATCH_STEP_MS


async def fill_ledger(subject: Subject, scope: str, size: int) -> None:
    """`size` sent entries in `scope`: bulk on the raw connection, one merge on JSON."""
    rows = [(f"fill-{n:06d}", FILL_START + n) for n in range(size)]
    if subject.raw is not None:
        await subject.raw.fill_ledger(scope, T0, rows)
        return
    entries = tuple(StartedEntry(scope, sid, at, sent=True) for sid, at in rows)
    await subject.store.merge_state(StateBatch(started=(StartedScope(scope, T0, entries),)))


async def allocate_revisions(subject: Subject) -> dict[str, Any]:
    store, raw = subject.store, subject.raw

    async def on_store(i: int) -> object:
        return await store.allocate_revisions(1, T0 + i)

    async def on_raw(i: int) -> object:
        assert raw is not None
        return await raw.allocate(1, T0 + i)

    return await compare(subject.plan, on_store, on_raw if raw else None)


async def profile_identity(subject: Subject) -> dict[str, Any]:
    store, raw = subject.store, subject.raw
    profile = "bench-identity"
    await store.profile_identity(profile)  # minted once: the workload reads an existing one

    async def on_store(_i: int) -> object:
        return await store.profile_identity(profile)

    async def on_raw(_i: int) -> object:
        assert raw is not None
        return await raw.identity(profile)

    return await compare(subject.plan, on_store, on_raw if raw else None)


async def record_started(subject: Subject, ledger: int) -> dict[str, Any]:
    """One new session per operation into a scope of `ledger` entries."""
    store, raw, plan = subject.store, subject.raw, subject.scaled(ledger)
    scope = f"bench-record-{ledger}"
    await fill_ledger(subject, scope, ledger)

    async def on_store(i: int) -> object:
        now = batch_now(i // plan.ops)
        await store.record_started(scope, [(f"new-{i}", now)], now)
        return None

    async def on_raw(i: int) -> object:
        assert raw is not None
        now = batch_now(i // plan.ops)
        await raw.record_started(scope, f"new-{i}", now, now)
        return None

    return await compare(plan, on_store, on_raw if raw else None)


async def claim_mark(subject: Subject, ledger: int) -> dict[str, Any]:
    """Claim one unsent entry and mark it sent, in a scope of `ledger` entries."""
    store, raw, plan = subject.store, subject.raw, subject.scaled(ledger)
    scope = f"bench-claim-{ledger}"
    await fill_ledger(subject, scope, ledger)

    async def prepare(batch: int) -> object:
        # Untimed: the batch's unsent entries; the store's prune drops the previous batch's.
        now = batch_now(batch)
        seen = [(f"claim-{batch}-{j}", now) for j in range(plan.ops)]
        await store.record_started(scope, seen, now)
        return None

    async def on_store(i: int) -> object:
        now = batch_now(i // plan.ops)
        for entry in await store.claim_started(scope, OWNER, now, LEASE_MS, 1):
            await store.mark_started_sent(scope, entry.session_id)
        return None

    async def on_raw(i: int) -> object:
        assert raw is not None
        return await raw.claim_mark(scope, OWNER, batch_now(i // plan.ops), LEASE_MS)

    return await compare(plan, on_store, on_raw if raw else None, prepare)


async def outbox(subject: Subject) -> dict[str, Any]:
    """Enqueue a deleted session and acknowledge it: the outbox stays empty."""
    store, raw = subject.store, subject.raw

    async def on_store(i: int) -> object:
        view = await store.enqueue_deleted(
            f"del-{i}", "bench", T0 + i, session_live=True, identity=None, scope=None
        )
        return await store.ack_deleted(view.id, view.through)

    async def on_raw(i: int) -> object:
        assert raw is not None
        return await raw.enqueue_ack(str(uuid.uuid4()), f"raw-del-{i}", "bench", T0 + i)

    return await compare(subject.plan, on_store, on_raw if raw else None)


Workload = Callable[[Subject], Awaitable[dict[str, Any]]]


def every(ledgers: tuple[int, ...]) -> list[tuple[str, int | None, Workload]]:
    """Every store workload as (name, ledger size, workload), in the documented order."""
    chosen: list[tuple[str, int | None, Workload]] = [
        ("allocate_revisions", None, allocate_revisions),
        ("profile_identity", None, profile_identity),
    ]
    chosen += [("record_started", n, functools.partial(record_started, ledger=n)) for n in ledgers]
    chosen += [("claim_mark", n, functools.partial(claim_mark, ledger=n)) for n in ledgers]
    chosen.append(("outbox_enqueue_ack", None, outbox))
    return chosen
