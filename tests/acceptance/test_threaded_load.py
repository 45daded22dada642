"""64 request threads against the threaded service on a real SQLite store while turns start and
end, then `stop()` in the middle of it all.

The CI run lasts a few seconds; `pytest -m soak tests/test_threaded_load.py -s` runs 30 s and
prints the figures docs/performance.md quotes (calls answered, p99 of blocking calls, stop time).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from backends import on
from databases import sessions_ended
from threaded_support import RelayThread, fd_targets, open_fds, relay_thread, until

from examples.hermes import Sessions
from relay.errors import ServiceStoppedError
from relay.store import PresenceLease, open_store
from relay.threaded import ThreadedRelayService

THREADS = 64
SESSIONS = 16
STOP_BOUND_S = 5.0


@dataclass
class Tally:
    """One request thread's record: what it asked, what was answered, how long each took."""

    issued: int = 0
    answered: int = 0
    stopped: int = 0
    changed: int = 0
    errors: list[BaseException] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    last_seq: int = 0  # the newest presence seq answered
    sent_seq: int = 0  # the newest presence seq sent


def request_thread(
    relay: ThreadedRelayService, n: int, tally: Tally, quit: threading.Event
) -> None:
    """Presence, viewed and `changed()` at random until told to quit or the service stops."""
    rng = random.Random(n)
    tab = f"tab-{n:05d}"
    while not quit.is_set():
        choice = rng.random()
        if choice < 0.3:
            relay.changed()
            tally.changed += 1
            continue
        tally.issued += 1
        began = time.monotonic()
        try:
            if choice < 0.7:
                tally.sent_seq += 1
                beat = {"tab_id": tab, "active": rng.random() < 0.5, "seq": tally.sent_seq}
                relay.update_presence(beat, "default")
                tally.last_seq = tally.sent_seq
            else:
                relay.mark_viewed(f"chat-{rng.randrange(SESSIONS):02d}")
        except ServiceStoppedError:
            tally.stopped += 1
            return
        except Exception as error:  # the test reports every one
            tally.errors.append(error)
            return
        tally.latencies.append(time.monotonic() - began)
        tally.answered += 1


def turns_thread(
    relay: ThreadedRelayService, host: Sessions, last: dict[str, str], quit: threading.Event
) -> None:
    """Turns start and end across the sessions, each ending `completed`, until told to quit."""
    turn = 0
    while not quit.is_set():
        sid = f"chat-{turn % SESSIONS:02d}"
        stream = f"{sid}-t{turn:05d}"
        host.start_run(sid, stream)
        relay.changed()
        time.sleep(0.02)
        relay.note_terminal(stream, "completed")
        host.end_run(stream)
        relay.changed()
        last[sid] = stream
        turn += 1


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def stored_presence(url: str) -> list[PresenceLease]:
    async def read() -> list[PresenceLease]:
        async with open_store(url) as store:
            return await store.presence_leases()

    return asyncio.run(read())


def run_load(dev: RelayThread, url: str, seconds: float) -> None:
    threads_before = set(threading.enumerate())
    fds_before = open_fds()
    host = Sessions()
    for n in range(SESSIONS):
        host.create(f"chat-{n:02d}", "default", f"Chat {n}")
    relay = ThreadedRelayService(url, host, relay_url=dev.url, allow_insecure_loopback=True)
    relay.start()
    relay.pair(dev.pairing(), "default", operator=True)

    quit_turns, quit_requests = threading.Event(), threading.Event()
    last: dict[str, str] = {}
    tallies = [Tally() for _ in range(THREADS)]
    turner = threading.Thread(target=turns_thread, args=(relay, host, last, quit_turns))
    workers = [
        threading.Thread(target=request_thread, args=(relay, n, tallies[n], quit_requests))
        for n in range(THREADS)
    ]
    began = time.monotonic()
    turner.start()
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    # The turns stop; the requests go on while the relay's rows are checked, and through stop().
    quit_turns.set()
    turner.join(30)
    assert not turner.is_alive(), "the turns thread is stuck"
    relay.changed()
    relay.flush()
    until(lambda: rows_right(dev, last), within=30)
    assert dev.stale() == 0
    announced = Counter(dev.started())
    assert set(announced) <= {f"chat-{n:02d}" for n in range(SESSIONS)}
    assert all(count == 1 for count in announced.values()), announced
    loaded = time.monotonic() - began

    runtime = relay._runtime
    assert runtime is not None
    stopping = time.monotonic()
    relay.stop()
    stop_s = time.monotonic() - stopping
    quit_requests.set()
    for worker in workers:
        worker.join(30)
    assert not any(worker.is_alive() for worker in workers), "a request thread is stuck"

    errors = [error for tally in tallies for error in tally.errors]
    assert errors == []
    issued = sum(t.issued for t in tallies)
    answered = sum(t.answered for t in tallies)
    cut = sum(t.stopped for t in tallies)
    assert issued == answered + cut  # every call answered, or told the service stopped
    latencies = [value for tally in tallies for value in tally.latencies]
    print(
        f"\n{THREADS} threads, {loaded:.1f}s under load: {answered} blocking calls answered "
        f"({answered / loaded:.0f}/s), {sum(t.changed for t in tallies)} changed(), "
        f"{len(last)} sessions turned; p50 {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms, "
        f"p99 {p99(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms; "
        f"stop() under load {stop_s:.2f}s, {cut} calls cut short"
    )
    assert stop_s < STOP_BOUND_S

    # Nothing left behind: threads, the loop, the store's connection, file handles.
    until(lambda: set(threading.enumerate()) <= threads_before, within=10)
    assert relay._runtime is None
    assert runtime.loop.is_closed()
    if url.startswith("sqlite"):
        until(lambda: not [t for t in fd_targets(open_fds()).values() if "relay.db" in t], 10)
    else:  # the pool's connections are closed, not left for the server to time out
        assert asyncio.run(sessions_ended(url, 2.0))
    # The dev relay's ends of the service's connections close as the relay sees them go.
    try:
        until(lambda: open_fds() <= fds_before, within=10)
    except AssertionError:
        raise AssertionError(fd_targets(open_fds() - fds_before)) from None

    # Nothing lost: each tab's stored presence is its newest answered heartbeat (or one sent
    # later, cut short by the stop after it was applied).
    leases = {lease.tab_id: lease for lease in stored_presence(url)}
    for n, tally in enumerate(tallies):
        if tally.last_seq:
            assert tally.last_seq <= leases[f"tab-{n:05d}"].seq <= tally.sent_seq


def rows_right(dev: RelayThread, last: dict[str, str]) -> bool:
    """Each turned session's row on the relay is its last turn, completed."""
    rows = {row["sessionId"]: (row["streamId"], row["phase"]) for row in dev.rows()}
    return all(rows.get(sid) == (stream, "completed") for sid, stream in last.items())


@on("sqlite", "postgres")
def test_64_threads_then_stop_under_load(store_url: str) -> None:
    """64 threads calling presence, viewed and `changed()` while turns start and end: no
    deadlock, every call answered, the relay's rows right; `stop()` amid it returns within 5 s
    and leaves no thread, store connection or file handle."""
    with relay_thread() as dev:
        run_load(dev, store_url, seconds=5.0)


@pytest.mark.soak
def test_64_threads_for_30_seconds(tmp_path: Path) -> None:
    """The same for 30 s on SQLite, for the figures."""
    with relay_thread() as dev:
        run_load(dev, f"sqlite:///{tmp_path / 'relay.db'}", seconds=30.0)
