"""The SQLite store's thread: calls in order, errors to the caller, a cancelled wait finishes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from relay.store.sql.drivers.sqlite import Worker


async def test_calls_run_off_the_loop_in_the_order_queued() -> None:
    """Each call runs on the worker's thread, after every call queued before it."""
    worker = Worker("test-worker")
    seen: list[tuple[int, str]] = []

    def note(n: int) -> int:
        seen.append((n, threading.current_thread().name))
        return n

    try:
        assert await asyncio.gather(*(worker.run(note, n) for n in range(20))) == list(range(20))
    finally:
        worker.stop()
    assert [n for n, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"test-worker"}


async def test_an_error_reaches_the_caller_and_the_thread_lives_on() -> None:
    """A call that raises hands its exception to its caller; the next call still runs."""
    worker = Worker("test-worker")

    def fail() -> None:
        raise ValueError("no")

    try:
        with pytest.raises(ValueError, match="no"):
            await worker.run(fail)
        assert await worker.run(int, "7") == 7
    finally:
        worker.stop()


async def test_a_cancelled_caller_stops_waiting_not_the_call() -> None:
    """A call whose caller was cancelled still runs to its end."""
    worker = Worker("test-worker")
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(5)
        done.set()

    try:
        waiting = asyncio.ensure_future(worker.run(slow))
        await asyncio.to_thread(started.wait, 5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await worker.run(int)  # queued after `slow`: returns once it has finished
        assert done.is_set()
    finally:
        worker.stop()
