"""`health()` on a store behind a silent network (issue 33): it answers within a second all
along, says the store is not reachable once it has been silent for the bounded wait, and says so
once in the log; the store's answer again is said once too."""

from __future__ import annotations

import asyncio
import time

from backends import on
from blackhole import Blackhole
from sqlalchemy import make_url

from relay import PublisherOptions
from relay.service import RelayService
from relay.store import open_store
from relay.testing import MemoryHost


@on("postgres")
async def test_health_answers_within_a_second_while_the_store_is_silent(store_url: str) -> None:
    """Lease 2 s, so the store's waits are bounded to 0.4 s: cut, every `health()` returns within
    1 s and within 1 s says the store is not reachable, with its silence; healed, it is again."""
    url = make_url(store_url)
    logs: list[str] = []
    async with Blackhole(url.host or "127.0.0.1", url.port or 5432) as hole:
        proxied = url.set(host="127.0.0.1", port=hole.port).render_as_string(hide_password=False)
        async with open_store(proxied) as store:
            service = RelayService(
                store,
                MemoryHost(["default"]),
                log=logs.append,
                publishing=PublisherOptions(lease_s=2.0, background=False),
            )
            await service.start()
            try:
                health = await service.health()
                assert (health.store_reachable, health.store_silent_s) == (True, None)
                hole.cut()
                began, said, slowest = time.monotonic(), None, 0.0
                while time.monotonic() - began < 2.5:
                    asked = time.monotonic()
                    health = await service.health()
                    slowest = max(slowest, time.monotonic() - asked)
                    if not health.store_reachable and said is None:
                        said = time.monotonic() - began
                    await asyncio.sleep(0.1)
                print(f"health at most {slowest:.2f}s while cut; store unreachable after {said}s")
                assert slowest < 1.0
                assert said is not None
                assert said <= 1.0
                assert health.store_silent_s is not None
                assert health.store_silent_s >= 0.4
                assert not health.ready
                assert sum("store has not answered" in line for line in logs) == 1
                hole.heal()
                began = time.monotonic()
                while not (health := await service.health()).store_reachable:
                    assert time.monotonic() - began < 3.0
                    await asyncio.sleep(0.1)
                assert health.store_silent_s is None
                assert sum("store answers again" in line for line in logs) == 1
            finally:
                await service.stop()
