"""A loopback TCP proxy that puts a network's distance between two ends, and counts round trips.

Each direction's bytes are held for half the round-trip time, in order, as a link with that
latency would. A round trip, as the proxy counts it, is a burst of bytes from the client that
follows an answer (or opens the connection): what one more request-and-answer costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


# A loop's timer wakes up to a millisecond late (epoll's timeout is in whole milliseconds): the
# last stretch of each hold is slept exactly, so a link's latency is what was asked, not 1-2 ms
# more a round trip.
_PRECISE_S = 0.0015


@dataclass
class Counts:
    round_trips: int = 0
    connections: int = 0


class _Link:
    """One connection: two pumps, each delaying its direction by `one_way_s`."""

    def __init__(self, counts: Counts, one_way_s: float) -> None:
        self.counts, self.one_way_s = counts, one_way_s
        self.answered = True  # a client's first bytes are a round trip

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                if (wait := due - loop.time()) > _PRECISE_S:
                    await asyncio.sleep(wait - _PRECISE_S)
                if (wait := due - loop.time()) > 0:
                    time.sleep(wait)  # noqa: ASYNC251 - on the proxy's own loop, under 1.5 ms
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(OSError):
                writer.write_eof()

        delivering = asyncio.create_task(deliver())
        try:
            while data := await reader.read(65536):
                if upstream and self.answered:
                    self.counts.round_trips += 1
                self.answered = not upstream
                queue.put_nowait((loop.time() + self.one_way_s, data))
        except OSError:
            pass
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(OSError):
                await delivering


class _Proxy:
    """The listening side, on the proxy's own loop: one `_Link` a connection."""

    def __init__(self, target_host: str, target_port: int, rtt_ms: float) -> None:
        self.target = (target_host, target_port)
        self.one_way_s = rtt_ms / 2000
        self.counts = Counts()
        self.links: set[asyncio.Task[None]] = set()

    async def start(self) -> asyncio.Server:
        return await asyncio.start_server(self._track, "127.0.0.1", 0)

    async def stop(self, server: asyncio.Server) -> None:
        server.close()
        for task in list(self.links):
            task.cancel()
        await asyncio.gather(*self.links, return_exceptions=True)
        await server.wait_closed()

    def _track(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._accept(client_r, client_w))
        self.links.add(task)
        task.add_done_callback(self.links.discard)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.counts.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        link = _Link(self.counts, self.one_way_s)
        try:
            await asyncio.gather(
                link.pump(client_r, server_w, upstream=True),
                link.pump(server_r, client_w, upstream=False),
            )
        finally:
            for writer in (client_w, server_w):
                writer.close()


@contextlib.asynccontextmanager
async def latency_proxy(
    target_host: str, target_port: int, rtt_ms: float
) -> AsyncIterator[tuple[int, Counts]]:
    """Listen on a loopback port of the system's choosing that forwards to the target with
    `rtt_ms` added to every round trip; yield (port, counts).

    The proxy runs on an event loop in a thread of its own: on the measured client's loop, the
    client's own work would hold its bytes past their time (about 2 ms a round trip, measured),
    and the proxy's sleeps would count as the client's.
    """
    proxy = _Proxy(target_host, target_port, rtt_ms)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="bench-proxy", daemon=True)
    thread.start()

    async def on_proxy_loop(step: Awaitable[T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_awaited(step), loop))

    try:
        server = await on_proxy_loop(proxy.start())
        try:
            yield server.sockets[0].getsockname()[1], proxy.counts
        finally:
            await on_proxy_loop(proxy.stop(server))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


async def _awaited(step: Awaitable[T]) -> T:
    return await step
