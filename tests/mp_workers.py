"""Worker bodies for the multi-process tests; each runs in a process of its own (`processes.py`)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from ledger_calls import mark_sent

from relay.store import open_store, resolve
from relay.store.sql.migrate import upgrade

NOW = 1_800_000_000_000


async def _wait(barrier: Any) -> None:
    await asyncio.to_thread(barrier.wait)


def allocate(index: int, barrier: Any, results: Any, url: str, ops: int) -> None:
    """Allocate `ops` batches of 1..3 revisions, the clock behind the floor half the time."""

    async def main() -> list[list[int]]:
        rng = random.Random(index)
        batches = []
        async with open_store(url) as store:
            await _wait(barrier)
            for _ in range(ops):
                now = NOW if rng.random() < 0.5 else 0
                batches.append(await store.allocate_revisions(rng.randint(1, 3), now))
        return batches

    results.put((index, asyncio.run(main())))


def mint(index: int, barrier: Any, results: Any, url: str, profiles: int, rounds: int) -> None:
    """Ask for every profile's identity, `rounds` times, in an order of this worker's own."""

    async def main() -> dict[str, str]:
        names = [f"profile-{n}" for n in range(profiles)]
        random.Random(index).shuffle(names)
        seen: dict[str, str] = {}
        async with open_store(url) as store:
            await _wait(barrier)
            for _ in range(rounds):
                for name in names:
                    identity = await store.profile_identity(name)
                    assert seen.setdefault(name, identity) == identity
        return seen

    results.put((index, asyncio.run(main())))


def claim(index: int, barrier: Any, results: Any, url: str, profile_id: str) -> None:
    """Claim small batches and mark them sent until the scope has nothing left to claim."""

    async def main() -> list[str]:
        rng = random.Random(index)
        owner = f"worker-{index}"
        claimed: list[str] = []
        async with open_store(url) as store:
            await _wait(barrier)
            while entries := await store.claim_started_scopes(
                [profile_id], owner, NOW, 3_600_000, limit=rng.randint(1, 4)
            ):
                for entry in entries:
                    claimed.append(entry.session_id)
                    await mark_sent(store, profile_id, entry.session_id)
        return claimed

    results.put((index, asyncio.run(main())))


def record(index: int, barrier: Any, results: Any, url: str, profile_id: str, ops: int) -> None:
    """Record one new session and queue one deletion per operation, all ids of this worker's own."""

    async def main() -> int:
        async with open_store(url) as store:
            await _wait(barrier)
            for n in range(ops):
                session = f"w{index}-s{n}"
                await store.record_started_scopes({profile_id: [(session, NOW + n)]}, NOW + n)
                await store.enqueue_deleted(
                    session, "default", NOW + n, session_live=False, identity=None, scope=None
                )
        return ops

    results.put((index, asyncio.run(main())))


def migrate(index: int, barrier: Any, results: Any, url: str) -> None:
    """Upgrade the store to head at the same moment as the other workers."""

    async def main() -> None:
        await _wait(barrier)
        await upgrade(resolve(url))

    asyncio.run(main())
    results.put((index, None))
