"""N replica processes on one Postgres at scale: how fresh the relay's rows stay.

A turn starts or ends on some replica every `step_s`; each event's freshness is the time until
the relay's row for its session shows it (the dev relay in this process keeps every row's
history, read every 10 ms). Also measured: Postgres commits per second (`pg_stat_database`),
the replicas' connections (`pg_stat_activity`, sampled) and their CPU.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.replica import profile_names, session_ids
from relay.protocol import TERMINAL_PHASES
from relay.service import RelayService
from relay.store import open_store, resolve
from relay.testing import DevRelay, MemoryHost, serve

POLL_S = 0.01


@dataclass
class Events:
    """What was asked of the replicas, and when the relay first showed each (Unix seconds)."""

    asked: list[tuple[str, str, bool, float]] = field(default_factory=list)  # sid, stream, end
    shown: dict[tuple[str, str, bool], float] = field(default_factory=dict)
    cursor: dict[int, int] = field(default_factory=dict)

    def watch(self, relay: DevRelay) -> None:
        now = time.time()
        for sid, stream, phase in relay.history(self.cursor):
            self.shown.setdefault((sid, stream or "", phase in TERMINAL_PHASES), now)

    def freshness_ms(self) -> list[float]:
        """Each shown event's freshness; a start coalesced into its end is shown with the end."""
        times = [
            self.shown.get((s, stream, end)) or self.shown.get((s, stream, True))
            for s, stream, end, _ in self.asked
        ]
        return [
            (shown - at) * 1000 for shown, (*_, at) in zip(times, self.asked, strict=True) if shown
        ]


async def _spawn(args: list[str]) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.replica", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    await child.stdout.readline()  # ready
    return child


def _send(child: asyncio.subprocess.Process, command: dict[str, Any]) -> None:
    assert child.stdin is not None
    child.stdin.write((json.dumps(command) + "\n").encode())


async def _pair(store_url: str, relay: DevRelay, relay_url: str, names: tuple[str, ...]) -> None:
    async with open_store(store_url) as store, httpx.AsyncClient() as http:
        service = RelayService(
            store, MemoryHost(names), relay_url=relay_url, allow_insecure_loopback=True, http=http
        )
        await service.start()
        for index, profile in enumerate(names):
            body = {
                "relay_url": relay_url,
                "publisher_id": "https://bench.example",
                "publisher_invitation": relay.mint_invitation(f"usr_{profile}"),
            }
            await service.pair(body, profile, operator=index == 0)
        await service.stop()


async def _server(store_url: str, sql: str) -> Any:
    import asyncpg

    from benchmarks.pgbench import libpq_dsn

    conn = await asyncpg.connect(libpq_dsn(store_url))
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
CONNECTIONS = (
    "SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = current_database()"  # less this one
)


async def measure(
    store_url: str, replicas: int, profiles: int, sessions: int, seconds: float, step_s: float = 0.1
) -> dict[str, Any]:
    """The run against a fresh, migrated Postgres database at `store_url`."""
    names = profile_names(profiles)
    pairs = session_ids(sessions, names)
    relay, events, rng = DevRelay(), Events(), random.Random(7)  # noqa: S311 - a schedule, not a secret
    async with serve(relay) as relay_url:
        await _pair(store_url, relay, relay_url, names)
        args = [store_url, relay_url, "", str(profiles), str(sessions)]
        children = [await _spawn([*args[:2], f"bench-{n}", *args[3:]]) for n in range(replicas)]
        # Measured from the steady state: the S sessions' announcements (a one-off burst of S
        # requests when a deployment first pairs) are out before the first event.
        for child in children:
            _send(child, {"op": "flush"})
        for child in children:
            assert child.stdout is not None
            await child.stdout.readline()
        running: dict[str, tuple[int, str]] = {}  # session -> (replica, stream)
        commits, samples = await _server(store_url, COMMITS), []
        began = time.time()
        next_event = began
        while (now := time.time()) < began + seconds:
            events.watch(relay)
            if now >= next_event:
                sid, _ = rng.choice(pairs)
                if sid in running:
                    replica, stream = running.pop(sid)
                    _send(children[replica], {"op": "end", "stream": stream})
                    events.asked.append((sid, stream, True, time.time()))
                else:
                    replica, stream = rng.randrange(replicas), f"{sid}-{int(now * 1000)}"
                    running[sid] = (replica, stream)
                    _send(children[replica], {"op": "start", "session": sid, "stream": stream})
                    events.asked.append((sid, stream, False, time.time()))
                next_event += step_s
                if len(events.asked) % round(1 / step_s) == 1:  # about once a second
                    samples.append(await _server(store_url, CONNECTIONS))
            await asyncio.sleep(POLL_S)
        elapsed = time.time() - began
        commits = await _server(store_url, COMMITS) - commits
        deadline = time.time() + 10  # the last events still on their way
        while time.time() < deadline and len(events.freshness_ms()) < len(events.asked):
            events.watch(relay)
            await asyncio.sleep(POLL_S)
        cpu = []
        for child in children:
            _send(child, {"op": "stop"})
            assert child.stdout is not None
            cpu.append(json.loads(await child.stdout.readline())["cpu_s"])
            await child.wait()
    fresh = sorted(events.freshness_ms())
    return {
        "replicas": replicas,
        "profiles": profiles,
        "sessions": sessions,
        "seconds": round(elapsed, 1),
        "events": len(events.asked),
        "events_not_shown": len(events.asked) - len(fresh),
        "freshness_p50_ms": round(statistics.median(fresh), 1) if fresh else None,
        "freshness_p99_ms": round(fresh[int(len(fresh) * 0.99) - 1], 1) if fresh else None,
        "commits_per_s": round(commits / elapsed, 1),
        "connections_per_replica": round(statistics.mean(samples) / replicas, 2)
        if samples
        else None,
        "cpu_per_replica": round(statistics.mean(cpu) / elapsed, 3),
        "store": resolve(store_url).display,
    }
