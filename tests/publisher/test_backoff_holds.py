"""A backoff holds (spec §1.5): after a failed pass the loop waits out the whole announced delay,
whatever changes arrive meanwhile, and what arrived is published by the pass that follows.

Changes arrive far faster than the delays here, so a loop that let a change cut its backoff short
would retry at the change rate: every gap between two attempts must be at least the delay the
first one announced, which is "passes attempted <= 1 + delays elapsed".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable

import pytest
from backends import MEMORY, on
from databases import admin_execute, set_read_only
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env

from relay import PublisherOptions
from relay.errors import RelayError, RelayHttpError, StoreUnavailableError
from relay.publishing.logs import Reporter
from relay.publishing.loop import PassLoop, backoff_delay
from relay.service import RelayService
from relay.store import RelayStore, open_store

# Delays of 0.2 s, 0.4 s, 0.8 s: the backoff's 5 s doubling, scaled down.
SCALE = 0.04
# `asyncio.sleep` may wake a clock tick early; a backoff cut short is off by far more.
SLACK_S = 0.01
RETRYING = re.compile(r"retrying in ([0-9.]+)s")


def scaled(_low: float, _high: float) -> float:
    return SCALE


@contextlib.asynccontextmanager
async def changes_every(seconds: float, change: Callable[[int], None]) -> AsyncIterator[None]:
    """Call `change(n)` every `seconds` until the block ends."""

    async def keep_changing() -> None:
        n = 0
        while True:
            change(n)
            n += 1
            await asyncio.sleep(seconds)

    task = asyncio.create_task(keep_changing())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def assert_gaps_hold(attempts: list[tuple[float, float]]) -> None:
    """Each (start, announced delay) is followed by a start at least that delay later."""
    for (start, delay), (following, _) in itertools.pairwise(attempts):
        assert following - start >= delay - SLACK_S, (start, delay, following)


@pytest.mark.parametrize(
    "failure",
    [RelayHttpError(503), StoreUnavailableError("db down")],
    ids=["relay-503", "store-unavailable"],
)
async def test_changes_during_a_backoff_never_cut_it_short(failure: RelayError) -> None:
    """With a change every 10 ms, a loop failing on the relay or on the store makes one attempt
    per announced delay, and the change that arrived meanwhile is in the pass after it."""
    starts: list[float] = []
    seen: list[int] = []
    latest = [0]
    three = asyncio.Event()

    async def failing_pass() -> None:
        starts.append(time.monotonic())
        seen.append(latest[0])
        if len(starts) == 4:
            three.set()
            return
        raise failure

    loop = PassLoop(failing_pass, report=Reporter(None, logging.getLogger("test")), uniform=scaled)

    def change(n: int) -> None:
        latest[0] = n
        loop.changed()

    loop.start()
    try:
        async with changes_every(0.01, change):
            await asyncio.wait_for(three.wait(), 30)
    finally:
        await loop.stop()
    delays = [backoff_delay(n, scaled) for n in (1, 2, 3)]
    assert delays == pytest.approx([0.2, 0.4, 0.8])
    # Passes after the fourth (a success) may follow at the change rate, as they should.
    assert len(starts) >= 4
    assert_gaps_hold([*zip(starts, delays, strict=False), (starts[3], 0.0)])
    assert seen[3] > seen[2], "the pass after a backoff publishes what changed during it"


async def test_flush_during_a_backoff_returns_after_the_pass_that_follows_it() -> None:
    """`flush()` never cuts a backoff short: it returns after the pass that ends it; `stop()`
    releases a flush that is still waiting."""
    starts: list[float] = []

    async def failing_pass() -> None:
        starts.append(time.monotonic())
        raise StoreUnavailableError("db down")

    loop = PassLoop(failing_pass, report=Reporter(None, logging.getLogger("test")), uniform=scaled)
    loop.start()
    try:
        loop.changed()
        for _ in range(1000):
            if starts:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(loop.flush(), 30)
        assert len(starts) == 2
        assert starts[1] - starts[0] >= 0.2 - SLACK_S
        waiting = asyncio.ensure_future(loop.flush())
        await asyncio.sleep(0.05)
        assert not waiting.done(), "the second backoff (0.4 s) is still running"
    finally:
        await loop.stop()
    await asyncio.wait_for(waiting, 5)


class Watched:
    """A service on `env` whose log lines are kept with their times; `recovered` is set by the
    recovery line; `change(n)` starts a turn in a new session and tells the service."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.lines: list[tuple[float, str]] = []
        self.recovered = asyncio.Event()
        self.service = RelayService(
            env.store,
            env.host,
            relay_url=RELAY_URL,
            http=env.http,
            clock=env.clock,
            log=self._log,
            publishing=PublisherOptions(uniform=scaled),
        )

    def _log(self, line: str) -> None:
        self.lines.append((time.monotonic(), line))
        if line.endswith("snapshot recovered"):
            self.recovered.set()

    def change(self, n: int) -> None:
        self.env.host.create_session(f"s{n}")
        self.env.host.start_run(f"s{n}")
        self.service.changed()


@on(MEMORY)
async def test_a_relay_answering_503_sees_one_attempt_per_delay_under_changes(
    store: RelayStore,
) -> None:
    """A relay answering three snapshots 503 while the app changes every 100 ms gets one attempt
    per announced delay; the pass after the last delay publishes the newest session."""
    async with relay_env(store) as env:
        await env.pair()
        watched = Watched(env)
        service, lines, recovered = watched.service, watched.lines, watched.recovered
        env.relay.inject("snapshot", 503, times=3)
        before = len(env.sent("snapshot"))  # pairing validated itself with one

        assert await service.start()
        try:
            async with changes_every(0.1, watched.change):
                await asyncio.wait_for(recovered.wait(), 30)
            newest = max(env.host.sessions, key=lambda sid: int(sid[1:]))
            await service.flush()
        finally:
            await service.stop()
        failed = [(at, float(m[1])) for at, line in lines if (m := RETRYING.search(line))]
        assert [delay for _, delay in failed] == pytest.approx([0.2, 0.4, 0.8])
        assert_gaps_hold(failed)
        (recovery,) = [at for at, line in lines if line.endswith("snapshot recovered")]
        assert recovery - failed[-1][0] >= 0.8 - SLACK_S
        assert [r.status for r in env.sent("snapshot")[before : before + 4]] == [503, 503, 503, 200]
        rows = env.relay.rows(PUBLISHER_ID, await env.profile_id())
        assert newest in {row.session_id for row in rows}


@on("postgres")
async def test_a_read_only_store_sees_one_attempt_per_delay_under_changes(
    store_url: str,
) -> None:
    """With the Postgres server read-only (its sessions ended, so the store reconnects to a
    read-only one) and a change every 100 ms, the publisher makes one attempt per announced
    delay, and the pass after the server takes writes again publishes the newest session."""
    async with open_store(store_url) as store, relay_env(store) as env:
        await env.pair()
        watched = Watched(env)
        service, lines, recovered = watched.service, watched.lines, watched.recovered

        await set_read_only(store_url, True)
        await admin_execute(
            store_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        # The first call finds its pooled connection ended, and the pool starts afresh.
        with contextlib.suppress(StoreUnavailableError):
            await store.revision_floor()
        assert await service.start()
        try:
            async with changes_every(0.1, watched.change):
                for _ in range(3000):
                    if sum(1 for _, line in lines if RETRYING.search(line)) >= 3:
                        break
                    await asyncio.sleep(0.01)
                await set_read_only(store_url, False)
                await asyncio.wait_for(recovered.wait(), 60)
            newest = max(env.host.sessions, key=lambda sid: int(sid[1:]))
            await service.flush()
        finally:
            await service.stop()
            await set_read_only(store_url, False)
        failed = [(at, float(m[1])) for at, line in lines if (m := RETRYING.search(line))]
        assert len(failed) >= 3
        assert all("read-only" in line for _, line in lines if RETRYING.search(line))
        assert_gaps_hold(failed)
        (recovery,) = [at for at, line in lines if line.endswith("snapshot recovered")]
        assert recovery - failed[-1][0] >= failed[-1][1] - SLACK_S
        rows = env.relay.rows(PUBLISHER_ID, await env.profile_id())
        assert newest in {row.session_id for row in rows}


async def test_a_backoff_after_a_silent_store_ends_when_the_store_answers() -> None:
    """A pass failed on a store that did not answer: the loop asks the store (its lease renewal)
    every `poll_s` during the backoff, and the first answer ends the backoff, not its delay; while
    the store stays silent no pass is tried."""
    starts: list[float] = []
    answering = asyncio.Event()
    done = asyncio.Event()

    async def one_pass() -> None:
        starts.append(time.monotonic())
        if len(starts) == 1:
            raise StoreUnavailableError("relay store x is unavailable: no answer within 4s")
        done.set()

    async def renew() -> float | None:
        if not answering.is_set():
            raise StoreUnavailableError("relay store x is unavailable: no answer within 4s")
        return None

    loop = PassLoop(
        one_pass,
        report=Reporter(None, logging.getLogger("test")),
        uniform=lambda _low, _high: 1.0,  # a 5 s backoff
        poll=renew,
        poll_s=0.05,
    )
    loop.start()
    try:
        loop.changed()
        await asyncio.sleep(0.5)
        assert len(starts) == 1, "no pass while the store is silent"
        answering.set()
        answered = time.monotonic()
        await asyncio.wait_for(done.wait(), 2)
    finally:
        await loop.stop()
    assert starts[1] - answered <= 0.5
    assert starts[1] - starts[0] < 5.0
