"""Replicas as real OS processes on one store, publishing to one dev relay this process serves."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import faketime
import forked

from relay.testing import DevRelay, serve

PROC = Path(__file__).with_name("replica_proc.py")
PUBLISHER_ID = "https://hermes.example"
REPLY_TIMEOUT_S = 60.0


class Process(Protocol):
    """What a replica's process offers: a forked child, or a real `exec` (libfaketime)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def kill(self) -> None: ...


@dataclass
class Replica:
    """One replica process and the pipe that drives it."""

    owner: str  # the name it was given
    process: Process
    incarnation: str = ""  # its owner id in the store: the name and a suffix of this process
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def call(self, op: str, **fields: Any) -> Any:
        """Send one command and wait for its answer; an error there fails the test here."""
        reply = await self.reply(op, **fields)
        if not reply["ok"]:
            raise AssertionError(f"replica {self.owner}: {op} failed: {reply['error']}")
        return reply.get("result")

    async def reply(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer, `{"ok": false, "error": ...}` included."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        async with self.lock:
            self.process.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
            await self.process.stdin.drain()
            line = await asyncio.wait_for(self.process.stdout.readline(), REPLY_TIMEOUT_S)
        if not line:
            raise AssertionError(f"replica {self.owner} exited ({self.process.returncode})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        """kill -9: no clean-up of any kind."""
        os.kill(self.process.pid, signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process is frozen where it stands (a GC pause, a VM frozen)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def paused(self) -> bool:
        """Whether the process is stopped now (state `T` in /proc)."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    async def stop(self) -> None:
        if self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.write(b'{"op": "stop"}\n')
            try:
                await self.process.stdin.drain()
                await asyncio.wait_for(self.process.wait(), 30)
            except (ConnectionError, TimeoutError):
                self.process.kill()
                await self.process.wait()


async def spawn(
    store_url: str,
    relay_url: str,
    owner: str,
    *,
    lease_s: float = 20.0,
    heartbeat_s: float = 60.0,
    offset_s: float = 0.0,
) -> Replica:
    """A replica process; with `offset_s`, its wall clock that many seconds off (libfaketime)."""
    argv = (store_url, relay_url, owner, str(lease_s), str(heartbeat_s))
    process: Process
    if offset_s:
        process = await faketime.start(PROC, *argv, offset_s=offset_s)
    else:
        process = await forked.start(PROC, *argv, capture_stderr=False)
    assert process.stdout is not None
    ready = json.loads(await asyncio.wait_for(process.stdout.readline(), REPLY_TIMEOUT_S))
    assert ready["ok"], ready
    return Replica(owner, process, ready["ready"])


@dataclass
class Cluster:
    relay: DevRelay
    relay_url: str
    store_url: str
    replicas: list[Replica]
    lease_s: float = 20.0
    heartbeat_s: float = 60.0
    # Seconds each replica's wall clock is off, by index (a restart keeps its host's clock).
    offsets: dict[int, float] = field(default_factory=dict)

    async def everywhere(self, op: str, **fields: Any) -> list[Any]:
        return list(await asyncio.gather(*(r.call(op, **fields) for r in self.live())))

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.returncode is None]

    def pairing(self, user: str = "usr_owner") -> dict[str, str]:
        """A pairing request with a fresh invitation of `user`."""
        return {
            "relay_url": self.relay_url,
            "publisher_id": PUBLISHER_ID,
            "publisher_invitation": self.relay.mint_invitation(user),
        }

    async def pair(self, replica: Replica | None = None) -> None:
        await (replica or self.replicas[0]).call("pair", body=self.pairing())
        await self.everywhere("start_service")

    async def spare(self, index: int) -> Replica:
        """A process under the name of replica `index`, ready but not started: its restart
        made in advance, so it can start within a lease of the kill."""
        return await spawn(
            self.store_url,
            self.relay_url,
            self.replicas[index].owner,
            lease_s=self.lease_s,
            heartbeat_s=self.heartbeat_s,
            offset_s=self.offsets.get(index, 0.0),
        )

    async def restart(self, index: int, spare: Replica | None = None) -> Replica:
        """A new process (`spare`, or one spawned now) under the name of replica `index`, dead
        by now, started in its place: a restarted pod. Its web app knows no sessions yet."""
        old = self.replicas[index]
        await old.process.wait()
        new = spare or await self.spare(index)
        self.replicas[index] = new
        await new.call("start_service")
        return new

    def grant_rows(self) -> list[dict[str, Any]]:
        return [row for grant in self.relay.state()["grants"] for row in grant["rows"]]

    def rows_of(self, session: str) -> list[dict[str, Any]]:
        """The relay's rows of `session`."""
        return [row for row in self.grant_rows() if row["sessionId"] == session]

    def history(self, session: str) -> list[tuple[str | None, str]]:
        """Each (stream, phase) the relay's row of `session` went through, repeats folded."""
        seen: list[tuple[str | None, str]] = []
        for sid, stream, phase in self.relay.history():
            if sid == session and (not seen or seen[-1] != (stream, phase)):
                seen.append((stream, phase))
        return seen

    def row(self, session: str) -> tuple[str | None, str] | None:
        """The relay's row of `session` now: (stream, phase)."""
        rows = [(r["streamId"], r["phase"]) for r in self.grant_rows() if r["sessionId"] == session]
        return rows[0] if rows else None

    def stale(self) -> int:
        return sum(grant["stale"] for grant in self.relay.state()["grants"])


@asynccontextmanager
async def cluster(
    store_url: str,
    count: int,
    *,
    lease_s: float = 20.0,
    heartbeat_s: float = 60.0,
    clock: Callable[[], float] = time.time,
    offsets: dict[int, float] | None = None,
) -> AsyncIterator[Cluster]:
    """`count` replicas of one store publishing to one dev relay on loopback; `offsets`: the
    seconds some of their wall clocks are off, by index."""
    offsets = offsets or {}
    relay = DevRelay(clock=clock)
    async with AsyncExitStack() as stack:
        relay_url = await stack.enter_async_context(serve(relay))
        replicas: list[Replica] = []
        try:
            for n in range(count):
                replicas.append(
                    await spawn(
                        store_url,
                        relay_url,
                        f"replica-{n}",
                        lease_s=lease_s,
                        heartbeat_s=heartbeat_s,
                        offset_s=offsets.get(n, 0.0),
                    )
                )
            group = Cluster(relay, relay_url, store_url, replicas, lease_s, heartbeat_s, offsets)
            yield group
        finally:
            # `restart` replaces entries of the same list: these are the processes now running.
            await asyncio.gather(*(r.stop() for r in replicas))


async def until(condition: Callable[[], bool], within: float, step: float = 0.05) -> float:
    """Seconds it took `condition` to hold; fails after `within` seconds."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > within:
            raise AssertionError(f"not within {within}s")
        await asyncio.sleep(step)
    return time.monotonic() - began
