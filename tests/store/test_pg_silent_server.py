"""A Postgres server that stops answering mid-call: the call ends after `statement_timeout` as
StoreUnavailableError, bounded from the client (`relay.store.sql.drivers.deadlines`), and the
store works again once the server answers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from backends import on
from sqlalchemy import make_url

from relay.errors import StoreUnavailableError
from relay.store import open_store

pytestmark = on("postgres")


class SilentProxy:
    """Forwards TCP to the server; while `silent` (a stalled server or network) it holds every
    byte either way, and delivers them in order once it is not."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.spoken = asyncio.Event()
        self.spoken.set()
        self.links: set[asyncio.Task[None]] = set()

    @property
    def silent(self) -> bool:
        return not self.spoken.is_set()

    @silent.setter
    def silent(self, silent: bool) -> None:
        if silent:
            self.spoken.clear()
        else:
            self.spoken.set()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                await self.spoken.wait()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))

    def accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._link(client_r, client_w))
        self.links.add(task)
        task.add_done_callback(self.links.discard)


@contextlib.asynccontextmanager
async def silent_proxy(url: str) -> AsyncIterator[tuple[str, SilentProxy]]:
    parsed = make_url(url)
    proxy = SilentProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
    server = await asyncio.start_server(proxy.accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield parsed.set(host="127.0.0.1", port=port).render_as_string(False), proxy
    finally:
        server.close()
        for task in list(proxy.links):
            task.cancel()
        await asyncio.gather(*proxy.links, return_exceptions=True)


@pytest.mark.timeout(60)
async def test_a_call_to_a_silent_server_ends_after_statement_timeout(store_url: str) -> None:
    """A read whose server stalls ends within 1.25 x `statement_timeout` (plus a margin) as
    StoreUnavailableError naming the timeout; answers come back once the server does."""
    async with silent_proxy(store_url) as (url, proxy):
        store = await open_store(f"{url}?statement_timeout=0.5")
        try:
            identity = await store.profile_identity("p")
            proxy.silent = True
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as caught:
                await store.profile_identity("p")
            assert time.monotonic() - started < 0.5 * 1.25 + 1.0
            assert "statement_timeout" in str(caught.value)
            proxy.silent = False
            assert await store.profile_identity("p") == identity
        finally:
            proxy.silent = False
            await store.close()
