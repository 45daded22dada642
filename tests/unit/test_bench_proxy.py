"""The bench's latency proxy: it adds the round-trip time it was given and counts round trips."""

from __future__ import annotations

import asyncio
import time

from benchmarks.proxy import latency_proxy


async def test_the_proxy_delays_each_round_trip_and_counts_it() -> None:
    """Three request-and-answer exchanges through a 40 ms proxy take at least 120 ms, arrive
    intact and count as three round trips on one connection."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    target = server.sockets[0].getsockname()[1]
    async with server, latency_proxy("127.0.0.1", target, 40.0) as (port, counts):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        began = time.perf_counter()
        answers = []
        for word in (b"one", b"two", b"three"):
            writer.write(word)
            await writer.drain()
            answers.append(await reader.readexactly(len(word)))
        elapsed = time.perf_counter() - began
        writer.close()
        await writer.wait_closed()
    assert answers == [b"ONE", b"TWO", b"THREE"]
    assert elapsed >= 0.12
    assert (counts.round_trips, counts.connections) == (3, 1)
