"""The store-side workloads, each paired with its raw-driver equivalent on the same data.

Each workload runs on a store of its own, so a ledger's size is the whole store's. A ledger
workload runs at every size at once, a store per size, on one scope filled to the size with sent
entries that start far in the future, so no prune ever removes them. Each batch of operations
runs at a `now` one day and an hour past the previous batch's, so the store's own 24 h prune
removes what the previous batch on that store added and the ledger stays at its size plus one
batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.raw import Raw
from benchmarks.rounds import Rounds, Side, compare, figures, interleave
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
    # Postgres: whether the filled ledger is analyzed, or left as a bulk load leaves it.
    analyzed: bool = True

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
        await subject.raw.fill_ledger(scope, T0, rows, analyze=subject.analyzed)
        return
    entries = tuple(StartedEntry(scope, sid, at, sent=True) for sid, at in rows)
    await subject.store.merge_state(StateBatch(started=(StartedScope(scope, T0, entries),)))


async def allocate_revisions(subject: Subject) -> dict[str, Any]:
    store, raw = subject.store, subject.raw

    async def on_store(batch: int, i: int) -> object:
        return await store.allocate_revisions(1, batch_now(batch) + i)

    async def on_raw(batch: int, i: int) -> object:
        assert raw is not None
        return await raw.allocate(1, batch_now(batch) + i)

    return await compare(subject.plan, on_store, on_raw if raw else None)


async def profile_identity(subject: Subject) -> dict[str, Any]:
    store, raw = subject.store, subject.raw
    profile = "bench-identity"
    await store.profile_identity(profile)  # minted once: the workload reads an existing one

    async def on_store(_batch: int, _i: int) -> object:
        return await store.profile_identity(profile)

    async def on_raw(_batch: int, _i: int) -> object:
        assert raw is not None
        return await raw.identity(profile)

    return await compare(subject.plan, on_store, on_raw if raw else None)


async def outbox(subject: Subject) -> dict[str, Any]:
    """Enqueue a deleted session and acknowledge it: the outbox stays empty."""
    store, raw = subject.store, subject.raw

    async def on_store(batch: int, i: int) -> object:
        now = batch_now(batch) + i
        view = await store.enqueue_deleted(
            f"del-{batch}-{i}", "bench", now, session_live=True, identity=None, scope=None
        )
        return await store.ack_deleted(view.id, view.through)

    async def on_raw(batch: int, i: int) -> object:
        assert raw is not None
        now = batch_now(batch) + i
        return await raw.enqueue_ack(str(uuid.uuid4()), f"raw-del-{batch}-{i}", "bench", now)

    return await compare(subject.plan, on_store, on_raw if raw else None)


Pair = tuple[Side, Side | None]


async def record_started(subject: Subject, ledger: int) -> Pair:
    """One new session per operation into a scope of `ledger` entries."""
    store, raw, ops = subject.store, subject.raw, subject.scaled(ledger).ops
    scope = f"bench-record-{ledger}"
    await fill_ledger(subject, scope, ledger)

    async def on_store(batch: int, i: int) -> object:
        now = batch_now(batch)
        await store.record_started_scopes({scope: [(f"new-{batch}-{i}", now)]}, now)
        return None

    async def on_raw(batch: int, i: int) -> object:
        assert raw is not None
        now = batch_now(batch)
        await raw.record_started(scope, f"new-{batch}-{i}", now, now)
        return None

    return Side(on_store, ops), Side(on_raw, ops) if raw else None


async def claim_mark(subject: Subject, ledger: int) -> Pair:
    """Claim one unsent entry and mark it sent, in a scope of `ledger` entries."""
    store, raw, ops = subject.store, subject.raw, subject.scaled(ledger).ops
    scope = f"bench-claim-{ledger}"
    await fill_ledger(subject, scope, ledger)

    async def prepare(batch: int) -> object:
        # Untimed: the batch's unsent entries; the store's prune drops the previous batch's.
        now = batch_now(batch)
        sightings = [(f"claim-{batch}-{j}", now) for j in range(ops)]
        await store.record_started_scopes({scope: sightings}, now)
        return None

    async def on_store(batch: int, _i: int) -> object:
        now = batch_now(batch)
        for entry in await store.claim_started_scopes([scope], OWNER, now, LEASE_MS, 1):
            sent = [(scope, entry.session_id)]
            await store.claim_started_scopes([], OWNER, now, LEASE_MS, sent=sent)
        return None

    async def on_raw(batch: int, _i: int) -> object:
        assert raw is not None
        return await raw.claim_mark(scope, OWNER, batch_now(batch), LEASE_MS)

    return Side(on_store, ops, prepare), Side(on_raw, ops, prepare) if raw else None


async def ledger(
    name: str, sized: Callable[[Subject, int], Awaitable[Pair]], subjects: dict[int, Subject]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A ledger workload at every size (a store each), all sizes and both sides interleaved in
    the same rounds: each size's figures, and the curve of store ops/s over the sizes."""
    sides: dict[str, Side] = {}
    for size, subject in subjects.items():
        on_store, on_raw = await sized(subject, size)
        sides[f"store@{size}"] = on_store
        if on_raw is not None:
            sides[f"raw@{size}"] = on_raw
    measured = await interleave(next(iter(subjects.values())).plan.rounds, sides)
    results = [
        {"name": name, "ledger": size, **figures(measured, f"store@{size}", f"raw@{size}")}
        for size in subjects
    ]
    smallest, largest = min(subjects), max(subjects)
    curve = {
        "ops_per_s": {str(r["ledger"]): r["store"]["ops_per_s"] for r in results},
        "largest_vs_smallest": measured.ratio(f"store@{largest}", f"store@{smallest}"),
    }
    return results, curve


Workload = Callable[[Subject], Awaitable[dict[str, Any]]]
SINGLE: dict[str, Workload] = {
    "allocate_revisions": allocate_revisions,
    "profile_identity": profile_identity,
    "outbox_enqueue_ack": outbox,
}
LEDGER: dict[str, Callable[[Subject, int], Awaitable[Pair]]] = {
    "record_started": record_started,
    "claim_mark": claim_mark,
}
