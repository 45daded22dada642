"""`Deadlines`: one timer bounds every call in flight, as asyncpg's per-statement timer did."""

from __future__ import annotations

import asyncio
import time

import pytest

from relay.store.sql.drivers.deadlines import CHECKS, Deadlines


async def test_a_call_past_its_deadline_is_cancelled_within_a_quarter_timeout_late() -> None:
    """A call still running at its deadline is cancelled, marked expired, within 1.25 x."""
    deadlines = Deadlines(0.2)
    started = time.monotonic()
    token = deadlines.start()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(5)
    took = time.monotonic() - started
    task = asyncio.current_task()
    assert task is not None
    task.uncancel()
    assert deadlines.expired(token)
    deadlines.end(token)
    assert 0.2 <= took < 0.2 * (1 + 1 / CHECKS) + 0.1


async def test_a_call_that_ends_in_time_is_left_alone() -> None:
    """Calls that end before their deadline are never cancelled, however many there are."""
    deadlines = Deadlines(0.2)
    for _ in range(20):
        token = deadlines.start()
        await asyncio.sleep(0.02)
        assert not deadlines.expired(token)
        deadlines.end(token)
    await asyncio.sleep(0.3)  # the timer looks once more, finds nothing, and stops


async def test_only_the_late_call_of_several_is_cancelled() -> None:
    """Each call has its own deadline: a late one is cancelled, one started later is not."""
    deadlines = Deadlines(0.3)

    async def call(pause: float) -> bool:
        token = deadlines.start()
        try:
            await asyncio.sleep(pause)
        except asyncio.CancelledError:
            return deadlines.expired(token)
        finally:
            deadlines.end(token)
        return False

    late = asyncio.create_task(call(5))
    await asyncio.sleep(0.2)
    on_time = asyncio.create_task(call(0.15))
    assert await late
    assert not await on_time
