"""How long the operator page takes on the server with a large store: a script, not a test.

    .venv/bin/python tests/operator_page_time.py --store sqlite:////tmp/page.db
    .venv/bin/python tests/operator_page_time.py --store postgresql://postgres@127.0.0.1/page

The store (migrated, empty) gets a registration, `--entries` started-ledger entries in one scope
(1% unsent), `--deleted` outbox entries and `--replicas` replicas holding a session each (each
records itself in the fleet); then
the replicas publish once; the backlog is filled in (nothing sends it after); then
the page is gathered and rendered `--rounds` times (each a cache miss: what one refresh costs
the store), and once through the ASGI route. Prints the median and the slowest, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

import httpx  # noqa: E402
from harness import relay_env  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402

from relay import asgi  # noqa: E402
from relay.operator import facts, page  # noqa: E402
from relay.routes import Caller  # noqa: E402
from relay.store import DeletedView, StartedEntry, StartedScope, StateBatch, open_store  # noqa: E402
from relay.testing import MemoryHost  # noqa: E402


async def identify(_: Request) -> Caller | None:
    return Caller("default", operator=True)


async def main(url: str, entries: int, deleted: int, replicas: int, rounds: int) -> None:
    async with open_store(url) as store, relay_env(store) as env:
        await env.pair()
        scope = await env.profile_id()
        for n in range(replicas):
            host = MemoryHost(["default"], clock=env.clock)
            host.create_session(f"r{n}")
            host.start_run(f"r{n}")
            other = env.new_service(host=host, owner=f"web-{n + 2}")
            await other.start()
            await other.current().run_once()  # type: ignore[union-attr]
        now_ms = int(env.clock() * 1000)
        unsent = entries // 100
        ledger = tuple(
            StartedEntry(scope, f"s-{i:06d}", now_ms - 3_600_000 + i % 3_000_000, sent=i >= unsent)
            for i in range(entries)
        )
        outbox = tuple(
            DeletedView(f"v-{i:06d}", f"gone-{i:06d}", "default", now_ms - i)
            for i in range(deleted)
        )
        began = time.perf_counter()
        await store.merge_state(
            StateBatch(started=(StartedScope(scope, now_ms - 86_400_000, ledger),), deleted=outbox)
        )
        took = time.perf_counter() - began
        print(f"filled {entries} ledger entries, {deleted} deletions in {took:.1f}s")
        timings = []
        for _ in range(rounds):
            began = time.perf_counter()
            now_ms = int(env.clock() * 1000)
            document = await facts.gather(env.service.store, now_ms, env.service.own())
            html = page.render(document)
            timings.append((time.perf_counter() - began) * 1000)
        shown = len(document["fleet"]["replicas"])
        (profile,) = document["profiles"]
        print(
            f"shown: {profile['announcements_unsent']} announcements unsent, "
            f"{profile['outbox_depth']} deletions unacknowledged"
        )
        print(
            f"gather+render ({rounds} rounds, {shown} replicas shown, {len(html)} bytes): "
            f"median {statistics.median(timings):.0f} ms, slowest {max(timings):.0f} ms"
        )
        app = Starlette(routes=asgi.routes(env.service, identify, operator=lambda c: True))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for label in ("first request (gathers)", "second request (cached)"):
                began = time.perf_counter()
                response = await client.get("/api/talaria/relay/operator")
                took = (time.perf_counter() - began) * 1000
                print(f"{label}: HTTP {response.status_code} in {took:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--deleted", type=int, default=1_000)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    found = parser.parse_args()
    asyncio.run(main(found.store, found.entries, found.deleted, found.replicas, found.rounds))
