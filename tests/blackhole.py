"""A TCP proxy in the test's own event loop that can stop forwarding, both ways, closing nothing.

    async with Blackhole("127.0.0.1", 5432) as hole:   # listens on hole.port
        hole.cut()    # packets dropped: no byte moves, no connection closes, no error anywhere
        hole.heal()   # what was held moves on, as TCP's retransmissions deliver it after a blip

What a firewall or security-group change, a NAT or load balancer that forgot a connection, or a
partition between zones does to a replica's connections to Postgres: its calls just wait. While
cut, new connections are accepted (the kernel completes the handshake) but get nothing further.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

CHUNK = 65536


class Blackhole:
    """Forwards connections on `port` (chosen when it starts) to `host:upstream_port`."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self._host = host
        self._upstream = upstream_port
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self.connections = 0

    async def __aenter__(self) -> Blackhole:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    @property
    def cut_now(self) -> bool:
        return not self._flowing.is_set()

    def cut(self) -> None:
        """Stop forwarding in both directions; every connection stays open."""
        self._flowing.clear()

    def heal(self) -> None:
        """Forward again, what was held first."""
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        await self._flowing.wait()
        up_reader, up_writer = await asyncio.open_connection(self._host, self._upstream)
        self._writers.append(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copy one direction; while cut, neither read (the sender's data waits in the kernel,
        as unacked packets would) nor write what was read."""
        try:
            while True:
                await self._flowing.wait()
                data = await source.read(CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()
