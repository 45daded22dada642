"""The publisher-pass workload: P profiles, S sessions, against a dev relay served in process."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

from relay.service import RelayService
from relay.store import RelayStore
from relay.testing import DevRelay, MemoryHost

RELAY_URL = "https://relay.example"
PUBLISHER_ID = "https://bench.example"
PROFILES = ("default", "work", "home")
START = 1_800_000_000.0


@dataclass
class Clock:
    """Unix seconds that move only when the bench says."""

    now: float = START

    def __call__(self) -> float:
        return self.now


def sql_counters(store: RelayStore) -> tuple[int | None, int | None]:
    """The SQL store's (transactions, statements) so far; None where the store keeps no count."""
    stats = getattr(store, "stats", None)
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


async def passes(store: RelayStore, sessions: int, steady_rounds: int) -> list[dict[str, Any]]:
    """The first pass after `sessions` new sessions appear (spread over the profiles), then the
    steady pass with nothing new (median wall time of `steady_rounds`)."""
    clock = Clock()
    relay = DevRelay(clock=clock)
    host = MemoryHost(PROFILES, clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=relay)) as http:
        service = RelayService(
            store,
            host,
            relay_url=RELAY_URL,
            http=http,
            clock=clock,
            log=lambda _line: None,
            publisher_options={"background": False, "uniform": lambda low, high: 1.0},
        )
        try:
            await service.start()
            for index, profile in enumerate(PROFILES):
                body = {
                    "relay_url": RELAY_URL,
                    "publisher_id": PUBLISHER_ID,
                    "publisher_invitation": relay.mint_invitation(f"usr_{profile}"),
                }
                await service.pair(body, profile, operator=index == 0)
            await timed_pass(service, store)  # tracking starts: earlier sessions stay unannounced
            clock.now += 10
            for n in range(sessions):
                session = host.create_session(f"s-{n}", PROFILES[n % len(PROFILES)])
                session.created_at = clock.now - 1
            first = await timed_pass(service, store)
            first["announced"] = len(relay.started_events)
            steady = [await timed_pass(service, store) for _ in range(steady_rounds)]
        finally:
            await service.stop()
    middle = sorted(steady, key=lambda p: float(p["wall_ms"]))[len(steady) // 2]
    middle = {**middle, "wall_ms": statistics.median(float(p["wall_ms"]) for p in steady)}
    middle["announced"] = len(relay.started_events) - first["announced"]
    common = {"profiles": len(PROFILES), "sessions": sessions}
    return [{**common, "pass": "first", **first}, {**common, "pass": "steady", **middle}]
