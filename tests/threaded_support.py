"""For tests of threaded servers: a dev relay on loopback served from a thread of its own, and
what the relay received, read on that thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from werkzeug.serving import make_server

from relay.testing import DevRelay, serve

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

T = TypeVar("T")
PUBLISHER_ID = "https://hermes.example"
ROOT = Path(__file__).resolve().parents[1]


class RelayThread:
    """A `DevRelay` served by uvicorn on an event loop in a thread; `run` reads or changes it
    there, between requests."""

    def __init__(self) -> None:
        self.relay = DevRelay()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        ready: Future[str] = Future()
        self._thread = threading.Thread(target=self._main, args=(ready,), daemon=True)
        self._thread.start()
        self.url = ready.result(30)

    def _main(self, ready: Future[str]) -> None:
        async def serving() -> None:
            self._stop = asyncio.Event()
            try:
                async with serve(self.relay) as url:
                    ready.set_result(url)
                    await self._stop.wait()
            except Exception as error:
                if not ready.done():
                    ready.set_exception(error)
                raise

        self._loop.run_until_complete(serving())
        self._loop.close()

    def run(self, call: Callable[[DevRelay], T]) -> T:
        """`call(relay)` on the relay's own thread."""
        answer: Future[T] = Future()

        def perform() -> None:
            try:
                answer.set_result(call(self.relay))
            except Exception as error:
                answer.set_exception(error)

        self._loop.call_soon_threadsafe(perform)
        return answer.result(30)

    def pairing(self, user: str = "usr_owner") -> dict[str, str]:
        """A pairing request with a fresh invitation of `user`."""
        invitation = self.run(lambda relay: relay.mint_invitation(user))
        return {
            "relay_url": self.url,
            "publisher_id": PUBLISHER_ID,
            "publisher_invitation": invitation,
        }

    def rows(self) -> list[dict[str, Any]]:
        """Every snapshot row the relay holds now."""
        state = self.run(lambda relay: relay.state())
        return [row for grant in state["grants"] for row in grant["rows"]]

    def started(self) -> list[str]:
        """The session ids of every session-started event the relay took, repeats included."""
        return self.run(lambda relay: [e.session_id for e in relay.started_events])

    def viewed(self) -> list[str]:
        return self.run(lambda relay: [ack.session_id for ack in relay.viewed])

    def stale(self) -> int:
        return int(self.run(lambda relay: sum(g["stale"] for g in relay.state()["grants"])))

    def close(self) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(30)


@contextmanager
def relay_thread() -> Iterator[RelayThread]:
    relay = RelayThread()
    try:
        yield relay
    finally:
        relay.close()


def until(condition: Callable[[], bool], within: float = 30.0, step: float = 0.05) -> float:
    """Seconds it took `condition` to hold; fails after `within` seconds."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > within:
            raise AssertionError(f"not within {within}s")
        time.sleep(step)
    return time.monotonic() - began


def open_fds() -> set[int]:
    """This process's open file descriptors."""
    return {int(name) for name in os.listdir("/proc/self/fd")}


def fd_targets(fds: set[int]) -> dict[int, str]:
    targets = {}
    for fd in fds:
        try:
            targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return targets


@contextmanager
def wsgi_served(app: WSGIApplication) -> Iterator[str]:
    """`app` served over real HTTP on a loopback port by werkzeug's threaded server: its URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
