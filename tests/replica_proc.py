"""One web-server replica in its own process, driven by JSON lines on stdin.

    python tests/replica_proc.py STORE_URL RELAY_URL OWNER LEASE_S HEARTBEAT_S

Each line is a command (`op` and its fields); each gets one line back, `{"ok": true, ...}` or
`{"ok": false, "error": ...}`. The web app's sessions live in a store every replica shares, so
the test sends `session` and `forget` to all of them; a turn runs on one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, cast

from relay import PublisherOptions, StoreUnavailableError
from relay.service import RelayService
from relay.store import RelayStore, open_store
from relay.testing import MemoryHost

# Seconds this replica's clock runs ahead: a soak test moves every clock past the 24 h window.
SKEW = [0.0]
# Set: this replica's wall clock is its time base, not the store's (`advance` moves it).
LOCAL_CLOCK_ENV = "TALARIA_RELAY_TEST_LOCAL_CLOCK"


def clock() -> float:
    return time.time() + SKEW[0]


class Trapped:
    """The store, with a trap: once armed for a method, the first call of it that returns work
    (rows this replica publishes, claims) stops the whole process (SIGSTOP) right after it
    returns, between taking a lease and acting on it; the test sends SIGCONT."""

    # What counts as work, by method.
    WORK: ClassVar[dict[str, Callable[[Any], bool]]] = {
        "pass_write": lambda rows: bool(rows.runs),
        "claim_started_scopes": bool,
        "claim_deleted": bool,
    }

    def __init__(self, store: RelayStore) -> None:
        self._store = store
        self.armed: str | None = None

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name != self.armed:
            return found

        async def trapped(*args: Any, **kwargs: Any) -> Any:
            result = await found(*args, **kwargs)
            if self.armed == name and self.WORK[name](result):
                self.armed = None
                os.kill(os.getpid(), signal.SIGSTOP)
            return result

        return trapped


class Kept(logging.Handler):
    """Keeps the library's lines of WARNING and above, for the test to read (`logs`)."""

    def emit(self, record: logging.LogRecord) -> None:
        LINES.append(f"{record.levelname} {record.getMessage()}")


LINES: list[str] = []


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def handle(
    service: RelayService, host: MemoryHost, trap: Trapped, command: dict[str, Any]
) -> Any:
    op, c = command["op"], command
    if op in STARTS_FIRST and not service.started:
        await service.start()  # as a web app does before it serves these
    if op in PLAIN:
        return await PLAIN[op](service, c)
    if op == "trap":
        if c["method"] not in Trapped.WORK:
            raise ValueError(f"no trap for {c['method']!r}")
        trap.armed = c["method"]
    elif op == "advance":
        SKEW[0] += c["seconds"]
    elif op == "rss":
        return _rss_kib()
    else:
        await _host_op(service, host, op, c)
    return None


async def _host_op(service: RelayService, host: MemoryHost, op: str, c: dict[str, Any]) -> None:
    """What the web app's own code does to its sessions and turns, then tells the service."""
    if op == "session":
        host.create_session(
            c["id"],
            c.get("profile", "default"),
            c.get("title", "Chat"),
            created_at=c.get("created_at"),
        )
    elif op == "forget":
        host.sessions.pop(c["id"], None)
    elif op == "start":
        host.start_run(c["session"], c["stream"], started_at=c.get("at"))
        _changed_if_started(service)
    elif op == "end":
        if service.started:  # a replica not started yet hosts turns that no publisher sees
            await service.note_terminal(c["stream"], c["phase"])
        host.end_run(c["stream"])
        _changed_if_started(service)
    elif op == "delete":  # `session`, or several at once: `sessions`
        for sid in c.get("sessions", [c.get("session")]):
            host.sessions.pop(sid, None)
            await service.clear_deleted(sid, c.get("profile"))
    else:
        raise ValueError(f"unknown op {op!r}")


# How often `start_service` tries `start()` before the last try, whose failure is the answer.
STARTS = 10


async def _start(service: RelayService, _: dict[str, Any]) -> bool:
    """`start()`, tried again while the store does not answer in time, as `start()` asks of a
    host: waits are bounded to a fifth of the lease (0.4 s at the tests' 2 s leases), which a
    loaded machine's Postgres can exceed."""
    for _attempt in range(STARTS):
        try:
            return await service.start()
        except StoreUnavailableError:
            await asyncio.sleep(0.1)
    return await service.start()


async def _changed(service: RelayService, _: dict[str, Any]) -> None:
    _changed_if_started(service)


def _changed_if_started(service: RelayService) -> None:
    if service.started:
        service.changed()


# Commands a web app serves only once its service has started.
STARTS_FIRST = ("presence", "pair", "flush", "delete")


async def _clock_offset(service: RelayService, _: dict[str, Any]) -> float | None:
    return (await service.health()).clock_offset_s


async def _logs(_: RelayService, __: dict[str, Any]) -> list[str]:
    return LINES


async def _health(service: RelayService, _: dict[str, Any]) -> dict[str, Any]:
    """`health()`, its fields (those this release has) and how long it took, in this process."""
    began = time.monotonic()
    found = await service.health()
    fields = {name: getattr(found, name) for name in found.__dataclass_fields__}
    return {**fields, "ready": found.ready, "latency_s": time.monotonic() - began}


# Commands that only call the service.
PLAIN: dict[str, Callable[[RelayService, dict[str, Any]], Awaitable[Any]]] = {
    "presence": lambda s, c: s.update_presence(c["body"], c.get("profile", "default")),
    "pair": lambda s, c: s.pair(c["body"], c.get("profile", "default"), operator=True),
    "start_service": _start,
    "flush": lambda s, _: s.flush(),
    "changed": _changed,
    "clock_offset": _clock_offset,
    "logs": _logs,
    "health": _health,
}


async def main(store_url: str, relay_url: str, owner: str, lease_s: float, beat_s: float) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("relay").addHandler(Kept(logging.WARNING))
    host = MemoryHost(["default", "work", "home"], clock=clock)
    async with open_store(store_url) as store:
        trap = Trapped(store)
        service = RelayService(
            cast(RelayStore, trap),
            host,
            relay_url=relay_url,
            allow_insecure_loopback=True,
            owner=owner,
            publishing=PublisherOptions(lease_s=lease_s, heartbeat_s=beat_s),
            clock=clock,
            # A test that moves every replica's clock by hand (`advance`) keeps each on its own.
            store_time=not os.environ.get(LOCAL_CLOCK_ENV),
        )
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        # The owner id of this process: the name and this incarnation's suffix.
        print(json.dumps({"ok": True, "ready": service.owner}), flush=True)
        while line := await reader.readline():
            command = json.loads(line)
            if command["op"] == "stop":
                break
            try:
                reply = {"ok": True, "result": await handle(service, host, trap, command)}
            except Exception as error:  # the test reads what went wrong
                reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            print(json.dumps(reply), flush=True)
        await service.stop()


if __name__ == "__main__":
    url, relay, name, lease, beat = sys.argv[1:6]
    asyncio.run(main(url, relay, name, float(lease), float(beat)))
