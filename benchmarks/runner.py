"""Which stores to measure, their scratch databases, and the whole run."""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import pgbench, publisher, targets, workloads
from benchmarks.distance import RELAY_RTTS_MS, STORE_RTTS_MS, relay_distance, store_distance
from benchmarks.raw import PostgresRaw, Raw, SqliteRaw
from benchmarks.rounds import Rounds
from relay.store import StoreTarget, open_store, resolve
from relay.store.testing_hooks import upgrade

PG_ENV = "TALARIA_RELAY_TEST_POSTGRES_URL"
STORE_RTTS = ", ".join(f"{rtt:g}" for rtt in STORE_RTTS_MS) + " ms"
RELAY_RTTS = ", ".join(f"{rtt:g}" for rtt in RELAY_RTTS_MS) + " ms"
Say = Callable[[str], None]
# The label of a Postgres ledger workload measured as a bulk load leaves the table.
NO_ANALYZE = "(no ANALYZE)"


@dataclass(frozen=True)
class Plan:
    """What to run: `stores` are URLs naming backends and places (never written to themselves)."""

    stores: tuple[str, ...] = ()
    quick: bool = False
    say: Say = field(default=lambda _line: None)
    # The ledger sizes to measure instead of the defaults (`--ledger-sizes`), smallest first.
    ledger_sizes: tuple[int, ...] = ()
    # Only the ledger workloads (`--ledger-only`): the large-ledger row CI prints.
    ledger_only: bool = False

    @property
    def rounds(self) -> Rounds:
        # Many short rounds: a burst of noise on a shared machine spoils few of them, and the
        # ratio is their median.
        return Rounds(rounds=3, ops=20) if self.quick else Rounds(rounds=15, ops=100)

    @property
    def ledgers(self) -> tuple[int, ...]:
        if self.ledger_sizes:
            return tuple(sorted(set(self.ledger_sizes)))
        return (10, 250) if self.quick else (10, 10_000, 100_000)

    @property
    def sessions(self) -> tuple[int, ...]:
        return (20, 200)

    @property
    def process_rounds(self) -> tuple[float, int]:
        """Seconds a side runs in a round, and rounds, for the processes against pgbench."""
        return (2.0, 1) if self.quick else (4.0, 5)

    def targets(self) -> list[StoreTarget]:
        """The named stores, else SQLite and JSON, plus Postgres when the test variable is set."""
        if self.stores:
            return [resolve(url) for url in self.stores]
        scratch = Path(tempfile.gettempdir())
        chosen = [resolve(f"sqlite:///{scratch / 'relay.db'}"), resolve(f"json://{scratch}")]
        if os.environ.get(PG_ENV):
            chosen.append(resolve(os.environ[PG_ENV]))
        return chosen


class Scratch:
    """Fresh stores of one backend beside the named one, each removed (or dropped) after use."""

    def __init__(self, target: StoreTarget) -> None:
        self.target = target

    @asynccontextmanager
    async def fresh(self, label: str) -> AsyncIterator[str]:
        """A new, migrated store's URL, for the length of the block."""
        if self.target.backend == "postgres":
            async with self._database(label) as url:
                yield url
            return
        if self.target.backend == "memory":
            yield self.target.display  # each open is a new store already
            return
        assert self.target.path is not None
        parent = self.target.path.parent if self.target.backend == "sqlite" else self.target.path
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="bench-", dir=parent) as scratch:
            directory = Path(scratch)
            if self.target.backend == "sqlite":
                yield f"sqlite:///{directory / f'{label}.db'}"
            else:
                yield f"json://{directory / label}"

    @asynccontextmanager
    async def _database(self, label: str) -> AsyncIterator[str]:
        import asyncpg

        url = self.target.sqlalchemy_url
        admin = pgbench.libpq_dsn(url.render_as_string(hide_password=False))
        name = f"talaria_bench_{label}_{uuid.uuid4().hex[:8]}"

        async def as_admin(statement: str) -> None:
            conn = await asyncpg.connect(admin, timeout=10)
            try:
                await conn.execute(statement)
            finally:
                await conn.close()

        await as_admin(f'CREATE DATABASE "{name}"')
        try:
            # Written as users write it, so the progress lines show it so.
            address = url.set(drivername="postgresql", database=name).render_as_string(
                hide_password=False
            )
            await upgrade(resolve(address))
            yield address
        finally:
            await as_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def raw_for(url: str) -> AsyncIterator[Raw | None]:
    """The raw driver on the store at `url`; None for JSON, which has none."""
    target = resolve(url)
    raw: Raw | None = None
    if target.backend == "sqlite":
        assert target.path is not None
        raw = SqliteRaw(target.path)
    elif target.backend == "postgres":
        raw = await PostgresRaw.connect(pgbench.libpq_dsn(url))
    try:
        yield raw
    finally:
        if raw is not None:
            await raw.close()


async def single(plan: Plan, scratch: Scratch, name: str) -> dict[str, Any]:
    """A workload without a ledger, on a fresh store beside the raw driver."""
    async with scratch.fresh(name) as url:
        plan.say(f"{scratch.target.backend}: {name} on {resolve(url).display}")
        async with open_store(url) as store, raw_for(url) as raw:
            figures = await workloads.SINGLE[name](workloads.Subject(store, raw, plan.rounds))
    return {"name": name, "ledger": None, **figures}


async def ledgers(
    plan: Plan, scratch: Scratch, results: list[dict[str, Any]], curves: dict[str, Any]
) -> None:
    """The ledger workloads at every size; on Postgres twice: after ANALYZE, and as a bulk load
    leaves the table (no statistics: what a plan chosen at every call sees then)."""
    states = (True, False) if scratch.target.backend == "postgres" else (True,)
    for name, sized in workloads.LEDGER.items():
        for analyzed in states:
            label = name if analyzed else f"{name} {NO_ANALYZE}"
            sizes = ", ".join(f"{n:,}" for n in plan.ledgers)
            plan.say(f"{scratch.target.backend}: {label} at {sizes}")
            async with AsyncExitStack() as stack:
                subjects = {}
                for size in plan.ledgers:
                    url = await stack.enter_async_context(scratch.fresh(f"{name}{size}"))
                    store = await stack.enter_async_context(open_store(url))
                    raw = await stack.enter_async_context(raw_for(url))
                    subjects[size] = workloads.Subject(store, raw, plan.rounds, analyzed)
                figures, curves[label] = await workloads.ledger(label, sized, subjects)
            results += figures


async def measure_store(plan: Plan, target: StoreTarget) -> dict[str, Any]:
    """Every workload on one backend, each on a fresh store."""
    scratch = Scratch(target)
    results: list[dict[str, Any]] = []
    curves: dict[str, Any] = {}
    if plan.ledger_only:
        await ledgers(plan, scratch, results, curves)
        return {
            "backend": target.backend,
            "url": target.display,
            "workloads": results,
            "ledger_curve": curves,
            "processes": None,
            "publisher": [],
            "publisher_shape": dict.fromkeys(publisher.SHAPE_KEYS),
            "distance": {"store": [], "relay": []},
        }
    for name in ("allocate_revisions", "profile_identity"):
        results.append(await single(plan, scratch, name))
    await ledgers(plan, scratch, results, curves)
    results.append(await single(plan, scratch, "outbox_enqueue_ack"))
    processes = None
    if target.backend == "postgres":
        plan.say(f"{target.backend}: {pgbench.PROCESSES} processes allocating revisions")
        async with scratch.fresh("processes") as url:
            processes = await asyncio.to_thread(
                pgbench.compare_processes, url, *plan.process_rounds
            )
    plan.say(f"{target.backend}: publisher passes, S={', '.join(map(str, plan.sessions))}")
    async with AsyncExitStack() as stack:
        stores = {}
        for sessions in plan.sessions:
            url = await stack.enter_async_context(scratch.fresh(f"publisher{sessions}"))
            stores[sessions] = await stack.enter_async_context(open_store(url))
        passes = await publisher.passes(stores, plan.rounds.rounds)
    distance: dict[str, Any] = {"store": [], "relay": []}
    if target.backend == "postgres":
        plan.say(f"{target.backend}: steady passes with the store {STORE_RTTS} away")
        distance["store"] = await store_distance(scratch.fresh, plan.rounds.rounds)
    if target.backend in ("sqlite", "postgres"):
        plan.say(f"{target.backend}: steady passes with the relay {RELAY_RTTS} away")
        distance["relay"] = await relay_distance(scratch.fresh, plan.rounds.rounds)
    return {
        "backend": target.backend,
        "url": target.display,
        "workloads": results,
        "ledger_curve": curves,
        "processes": processes,
        "publisher": passes,
        "publisher_shape": publisher.shape(passes),
        "distance": distance,
    }


async def run(plan: Plan) -> dict[str, Any]:
    """The whole bench: one document with every figure."""
    stores = [await measure_store(plan, target) for target in plan.targets()]
    document: dict[str, Any] = {
        "version": 1,
        "quick": plan.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "method": {
            "rounds": plan.rounds.rounds,
            "ops_per_round": plan.rounds.ops,
            "ledgers": list(plan.ledgers),
        },
        "stores": stores,
    }
    document["targets"] = targets.check(document)
    return document
