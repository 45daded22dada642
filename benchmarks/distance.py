"""A publisher pass at network distance: the store, or the relay, behind a latency proxy.

What a deployment pays on every pass is round trips (to a Postgres a zone away, through
PgBouncer; to a relay across the internet) and, on SQLite, fsyncs. Each row is the median of
steady passes (nothing new, every profile's snapshot sent), with the round trips the proxy
counted, the store's transactions and its write transactions (on SQLite, fsync-bearing commits).
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.proxy import Counts, latency_proxy
from benchmarks.publisher import Publishing, timed_pass
from relay.store import open_store, resolve
from relay.store.testing_hooks import sent

STORE_RTTS_MS = (0.0, 1.0, 5.0, 20.0)
RELAY_RTTS_MS = (0.0, 50.0)
STORE_PROFILES = 3
RELAY_PROFILES = 10
SESSIONS = 20


async def _steady(bench: Publishing, rounds: int, counts: Counts | None) -> dict[str, Any]:
    """The median of `rounds` steady passes, and write transactions per pass."""
    writes = _writes(bench)
    passes = []
    for _ in range(rounds):
        before = counts.round_trips if counts else 0
        figures = await timed_pass(bench.service, bench.store)
        figures["round_trips"] = counts.round_trips - before if counts else None
        passes.append(figures)
    middle = sorted(passes, key=lambda p: float(p["wall_ms"]))[len(passes) // 2]
    return {
        **middle,
        "wall_ms": statistics.median(float(p["wall_ms"]) for p in passes),
        "writes": None if writes is None else ((_writes(bench) or 0) - writes) / rounds,
        "profiles": len(bench.profiles),
    }


def _writes(bench: Publishing) -> int | None:
    stats = sent(bench.store)
    return None if stats is None else int(stats.writes)


async def store_distance(fresh: Any, rounds: int) -> list[dict[str, Any]]:
    """Steady passes with the Postgres store `STORE_RTTS_MS` away (`fresh(label)` gives a new,
    migrated database's URL as an async context manager)."""
    rows = []
    for rtt in STORE_RTTS_MS:
        async with fresh(f"distance{int(rtt)}") as url:
            address = resolve(url).sqlalchemy_url
            async with latency_proxy(address.host or "127.0.0.1", address.port or 5432, rtt) as (
                port,
                counts,
            ):
                proxied = address.set(host="127.0.0.1", port=port)
                async with (
                    open_store(proxied.render_as_string(hide_password=False)) as store,
                    Publishing(store, SESSIONS, profiles=_profiles(STORE_PROFILES)) as bench,
                ):
                    rows.append({"store_rtt_ms": rtt, **await _steady(bench, rounds, counts)})
    return rows


async def relay_distance(fresh: Any, rounds: int) -> list[dict[str, Any]]:
    """Steady passes of `RELAY_PROFILES` profiles with the relay `RELAY_RTTS_MS` away."""
    rows = []
    for rtt in RELAY_RTTS_MS:
        async with (
            fresh(f"relay{int(rtt)}") as url,
            open_store(url) as store,
            Publishing(
                store, SESSIONS, profiles=_profiles(RELAY_PROFILES), relay_rtt_ms=rtt
            ) as bench,
        ):
            rows.append({"relay_rtt_ms": rtt, **await _steady(bench, rounds, bench.relay_counts)})
    return rows


def _profiles(count: int) -> tuple[str, ...]:
    return ("default", *(f"p{n}" for n in range(1, count)))
