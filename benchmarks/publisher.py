"""The publisher-pass workload: P profiles, S sessions, against a dev relay served in process."""

from __future__ import annotations

import statistics
import time
from contextlib import AsyncExitStack
from typing import Any

import httpx

from benchmarks.proxy import Counts, latency_proxy
from relay import PublisherOptions
from relay.publishing.announcements import STARTED_BATCH
from relay.service import RelayService
from relay.store import RelayStore
from relay.store.testing_hooks import sent
from relay.testing import Clock, DevRelay, MemoryHost, serve

RELAY_URL = "https://relay.example"
PUBLISHER_ID = "https://bench.example"
PROFILES = ("default", "work", "home")


def sql_counters(store: RelayStore) -> tuple[int | None, int | None]:
    """The SQL store's (transactions, statements) so far; None where the store keeps no count."""
    stats = sent(store)
    if stats is None:
        return None, None
    return int(stats.transactions), int(stats.statements)


def _spent(before: tuple[int | None, int | None], after: tuple[int | None, int | None]) -> Any:
    return [None if b is None or a is None else a - b for b, a in zip(before, after, strict=True)]


async def timed_pass(service: RelayService, store: RelayStore) -> dict[str, Any]:
    """One `run_once()`: its wall time and the store work it cost."""
    publisher = service.current()
    assert publisher is not None
    before = sql_counters(store)
    began = time.perf_counter()
    delay = await publisher.run_once()
    wall = time.perf_counter() - began
    transactions, statements = _spent(before, sql_counters(store))
    return {
        "wall_ms": round(wall * 1000, 2),
        "transactions": transactions,
        "statements": statements,
        "failed": delay is not None,
    }


class Publishing:
    """One store, a dev relay and a host whose P profiles are paired; `async with` it.

    The relay is called in process, or with `relay_rtt_ms` served over loopback HTTP behind a
    proxy that adds that round-trip time (`benchmarks.proxy`).
    """

    def __init__(
        self,
        store: RelayStore,
        sessions: int,
        *,
        profiles: tuple[str, ...] = PROFILES,
        relay_rtt_ms: float | None = None,
    ) -> None:
        self.store, self.sessions, self.profiles = store, sessions, profiles
        self.relay_rtt_ms = relay_rtt_ms
        self.relay_counts: Counts | None = None  # round trips to the relay, when proxied
        self.clock = Clock()
        self.relay = DevRelay(clock=self.clock)
        self.host = MemoryHost(profiles, clock=self.clock)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Publishing:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def _start(self) -> None:
        relay_url = RELAY_URL
        transport: httpx.AsyncBaseTransport | None = httpx.ASGITransport(app=self.relay)
        if self.relay_rtt_ms is not None:
            served = await self._stack.enter_async_context(serve(self.relay))
            port, self.relay_counts = await self._stack.enter_async_context(
                latency_proxy("127.0.0.1", int(served.rsplit(":", 1)[1]), self.relay_rtt_ms)
            )
            relay_url, transport = f"http://127.0.0.1:{port}", None
        http = await self._stack.enter_async_context(httpx.AsyncClient(transport=transport))
        self.service = RelayService(
            self.store,
            self.host,
            relay_url=relay_url,
            allow_insecure_loopback=self.relay_rtt_ms is not None,
            http=http,
            clock=self.clock,
            log=lambda _line: None,
            publishing=PublisherOptions(background=False, uniform=lambda low, high: 1.0),
        )
        self._stack.push_async_callback(self.service.stop)
        await self.service.start()
        for index, profile in enumerate(self.profiles):
            body = {
                "relay_url": relay_url,
                "publisher_id": PUBLISHER_ID,
                "publisher_invitation": self.relay.mint_invitation(f"usr_{profile}"),
            }
            await self.service.pair(body, profile, operator=index == 0)
        await self.steady()  # tracking starts: sessions seen before stay unannounced

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def first(self) -> dict[str, Any]:
        """The pass after `sessions` new sessions appear, spread over the profiles in turn."""
        self.clock.advance(10)
        for n in range(self.sessions):
            session = self.host.create_session(f"s-{n}", self.profiles[n % len(self.profiles)])
            session.created_at = self.clock.now - 1
        figures = await timed_pass(self.service, self.store)
        return {**figures, "announced": len(self.relay.started_events)}

    async def steady(self) -> dict[str, Any]:
        """A pass with nothing new."""
        return await timed_pass(self.service, self.store)


async def passes(stores: dict[int, RelayStore], steady_rounds: int) -> list[dict[str, Any]]:
    """For each S (the keys of `stores`): the first pass, then `steady_rounds` steady passes,
    the sizes taking turns so that noise on the machine lands on each alike; a steady pass's
    figures are those of its median wall time."""
    async with AsyncExitStack() as stack:
        benches = [
            await stack.enter_async_context(Publishing(store, sessions))
            for sessions, store in stores.items()
        ]
        firsts = [await bench.first() for bench in benches]
        steadies: list[list[dict[str, Any]]] = [[] for _ in benches]
        for number in range(steady_rounds):
            for index in range(len(benches))[:: 1 if number % 2 == 0 else -1]:
                steadies[index].append(await benches[index].steady())
    document = []
    for bench, first, steady in zip(benches, firsts, steadies, strict=True):
        middle = sorted(steady, key=lambda p: float(p["wall_ms"]))[len(steady) // 2]
        middle = {**middle, "wall_ms": statistics.median(float(p["wall_ms"]) for p in steady)}
        middle["announced"] = len(bench.relay.started_events) - first["announced"]
        common = {"profiles": len(bench.profiles), "sessions": bench.sessions}
        document += [{**common, "pass": "first", **first}, {**common, "pass": "steady", **middle}]
    return document


def batches(sessions: int) -> int:
    """Batches a first pass announces `sessions` in: one claim spans every profile, so the
    sessions of all profiles go out `STARTED_BATCH` at a time."""
    return -(-sessions // STARTED_BATCH)


def _kind(passes: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return sorted((p for p in passes if p["pass"] == kind), key=lambda p: int(p["sessions"]))


SHAPE_KEYS = (
    "steady_wall_largest_vs_smallest",
    "steady_same_cost",
    "first_transactions_fixed",
    "first_transactions_per_batch",
)


def shape(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """The passes against the issue's targets: the steady pass costs the same at every S, and
    the first pass costs the steady pass's transactions + `fixed` + `per_batch` * batches of
    `STARTED_BATCH` (fitted on the smallest and largest S); None where the store counts no
    transactions."""
    first, steady = _kind(passes, "first"), _kind(passes, "steady")
    walls = [float(p["wall_ms"]) for p in steady]
    figures: dict[str, Any] = {
        "steady_wall_largest_vs_smallest": round(walls[-1] / walls[0], 3) if walls[0] else None,
        "steady_same_cost": None,
        "first_transactions_fixed": None,
        "first_transactions_per_batch": None,
    }
    if any(p["transactions"] is None for p in passes) or len(first) < 2:
        return figures
    figures["steady_same_cost"] = len({(p["transactions"], p["statements"]) for p in steady}) == 1
    low, high = first[0], first[-1]
    b_low, b_high = (batches(p["sessions"]) for p in (low, high))
    per_batch = (high["transactions"] - low["transactions"]) / (b_high - b_low)
    figures["first_transactions_per_batch"] = round(per_batch, 2)
    fixed = low["transactions"] - steady[0]["transactions"] - per_batch * b_low
    figures["first_transactions_fixed"] = round(fixed, 2)
    return figures
