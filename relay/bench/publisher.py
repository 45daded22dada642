"""The publisher-pass workload: P profiles, S sessions, against a dev relay served in process."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx

from relay.publisher import STARTED_BATCH
from relay.service import RelayService
from relay.store import RelayStore
from relay.testing import Clock, DevRelay, MemoryHost

RELAY_URL = "https://relay.example"
PUBLISHER_ID = "https://bench.example"
PROFILES = ("default", "work", "home")


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
            clock.advance(10)
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


def batches(sessions: int, profiles: int) -> int:
    """Claims a first pass makes: `passes` spreads the sessions over the profiles in turn, and
    each profile claims its new entries `STARTED_BATCH` at a time."""
    return sum(-(-len(range(p, sessions, profiles)) // STARTED_BATCH) for p in range(profiles))


def _kind(passes: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return sorted((p for p in passes if p["pass"] == kind), key=lambda p: int(p["sessions"]))


def shape(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """The passes against the issue's targets: the steady pass costs the same at every S, and
    the first pass costs `per_profile` * P + `per_batch` * batches of 16 (fitted on the smallest
    and largest S); None where the store counts no transactions."""
    first, steady = _kind(passes, "first"), _kind(passes, "steady")
    walls = [float(p["wall_ms"]) for p in steady]
    figures: dict[str, Any] = {
        "steady_wall_largest_vs_smallest": round(walls[-1] / walls[0], 3) if walls[0] else None,
        "steady_same_cost": None,
        "first_transactions_per_profile": None,
        "first_transactions_per_batch": None,
    }
    if any(p["transactions"] is None for p in passes) or len(first) < 2:
        return figures
    figures["steady_same_cost"] = len({(p["transactions"], p["statements"]) for p in steady}) == 1
    low, high = first[0], first[-1]
    b_low, b_high = (batches(p["sessions"], p["profiles"]) for p in (low, high))
    per_batch = (high["transactions"] - low["transactions"]) / (b_high - b_low)
    figures["first_transactions_per_batch"] = round(per_batch, 2)
    fixed = low["transactions"] - per_batch * b_low
    figures["first_transactions_per_profile"] = round(fixed / low["profiles"], 2)
    return figures
