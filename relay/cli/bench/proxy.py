"""A loopback TCP proxy that puts a network's distance between two ends, and counts round trips.

Each direction's bytes are held for half the round-trip time, in order, as a link with that
latency would. A round trip, as the proxy counts it, is a burst of bytes from the client that
follows an answer (or opens the connection): what one more request-and-answer costs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


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
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
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


@contextlib.asynccontextmanager
async def latency_proxy(
    target_host: str, target_port: int, rtt_ms: float
) -> AsyncIterator[tuple[int, Counts]]:
    """Listen on a loopback port of the system's choosing that forwards to the target with
    `rtt_ms` added to every round trip; yield (port, counts)."""
    counts = Counts()
    links: set[asyncio.Task[None]] = set()

    async def accept(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        counts.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_w.close()
            return
        link = _Link(counts, rtt_ms / 2000)
        try:
            await asyncio.gather(
                link.pump(client_r, server_w, upstream=True),
                link.pump(server_r, client_w, upstream=False),
            )
        finally:
            for writer in (client_w, server_w):
                writer.close()

    def track(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(accept(client_r, client_w))
        links.add(task)
        task.add_done_callback(links.discard)

    server = await asyncio.start_server(track, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], counts
    finally:
        server.close()
        for task in list(links):
            task.cancel()
        await asyncio.gather(*links, return_exceptions=True)
        await server.wait_closed()
