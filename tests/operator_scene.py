"""Three replicas of a web app on one store, publishing to a dev relay, for the operator page.

`web-1` is an async `RelayService` whose routes (and page) uvicorn serves through `relay.asgi`
on a loop of its own thread; `web-2` a `ThreadedRelayService` whose routes werkzeug serves
through `relay.wsgi`; `web-3` a threaded one that serves nothing. Each hosts one running turn,
so each holds a lease in the store. After every replica published once, the relay answers 503
to snapshots (with `Retry-After: 600`) and `web-1` publishes again: it is backing off. A
profile with a hostile name and one with a 4,096-character name are enrolled, and `web-1`'s
session has a hostile title. `web-2` and `web-3` publish twice, so their fleet rows carry a pass
and the page draws their strips from the fleet record.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from hostile import HOSTILE_NAMES
from starlette.applications import Starlette
from starlette.requests import Request
from threaded_support import RelayThread, relay_thread
from threaded_support import wsgi_served as serve_wsgi

from examples.hermes import Sessions
from relay import PublisherOptions, asgi, wsgi
from relay.routes import Caller
from relay.service import RelayService
from relay.store import open_store
from relay.testing import serve
from relay.threaded import ThreadedRelayService
from relay.threaded.host import OffLoopHost

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
else:
    WSGIEnvironment = Any

HOSTILE_PROFILE = HOSTILE_NAMES[1]  # '"><img src=x onerror=alert(1)>'
HOSTILE_TITLE = HOSTILE_NAMES[0]  # '<script>alert(1)</script>'
# The longest name enrollment takes, with no place to break it: the page must still fit.
LONG_PROFILE = "p" * 4096
PROFILES = ("default", HOSTILE_PROFILE, LONG_PROFILE)
TOKENS = {
    "owner-token": Caller("default", operator=True),
    "member-token": Caller("default", operator=False),
    "hostile-token": Caller(HOSTILE_PROFILE, operator=True),
    "long-token": Caller(LONG_PROFILE, operator=True),
}
OWNER = {"authorization": "Bearer owner-token"}
MEMBER = {"authorization": "Bearer member-token"}
PAGE = "/api/talaria/relay/operator"
# Replicas that do not back off stay quiet: no heartbeat pass during the test.
QUIET = PublisherOptions(heartbeat_s=3600)


def caller(authorization: str | None) -> Caller | None:
    return TOKENS.get((authorization or "").removeprefix("Bearer "))


def is_operator(found: Caller) -> bool:
    return found.operator


async def identify(request: Request) -> Caller | None:
    return caller(request.headers.get("authorization"))


def identify_wsgi(environ: WSGIEnvironment) -> Caller | None:
    return caller(environ.get("HTTP_AUTHORIZATION"))


class AsgiReplica:
    """An async service and its uvicorn server on a loop of their own thread."""

    def __init__(self, store_url: str, host: Sessions, relay_url: str, owner: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self.service: RelayService | None = None
        ready: Future[str] = Future()
        args = (store_url, host, relay_url, owner, ready)
        self._thread = threading.Thread(target=self._main, args=args, daemon=True)
        self._thread.start()
        self.url = ready.result(60)

    def _main(
        self, store_url: str, host: Sessions, relay_url: str, owner: str, ready: Future[str]
    ) -> None:
        async def serving() -> None:
            self._stop = asyncio.Event()
            try:
                with ThreadPoolExecutor(2) as pool:
                    async with open_store(store_url) as store:
                        service = RelayService(
                            store,
                            OffLoopHost(host, pool),
                            relay_url=relay_url,
                            owner=owner,
                            allow_insecure_loopback=True,
                        )
                        await service.start()
                        self.service = service
                        found = asgi.routes(lambda: service, identify, operator=is_operator)
                        try:
                            async with serve(Starlette(routes=found)) as url:
                                ready.set_result(url)
                                await self._stop.wait()
                        finally:
                            await service.stop()
            except Exception as error:
                if not ready.done():
                    ready.set_exception(error)
                raise

        self._loop.run_until_complete(serving())
        self._loop.close()

    def flush(self) -> None:
        assert self.service is not None
        asyncio.run_coroutine_threadsafe(self.service.flush(), self._loop).result(30)

    def backing_off(self) -> None:
        """Ask for a pass, and return once a pass failed and the publisher backs off."""
        assert self.service is not None
        service = self.service

        async def failed() -> None:
            # Not `flush()`: a pass already under way may take the failure, and then the pass
            # flush waits for begins only when the backoff ends (seen: a 30 s timeout).
            service.changed()
            for _ in range(1500):
                if (await service.health()).backoff_until is not None:
                    return
                await asyncio.sleep(0.02)
            raise AssertionError("web-1 did not back off within 30 s")

        asyncio.run_coroutine_threadsafe(failed(), self._loop).result(60)

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@contextmanager
def wsgi_served(service: ThreadedRelayService) -> Iterator[str]:
    router = wsgi.Router(service, identify_wsgi, operator=is_operator)
    with serve_wsgi(router) as url:
        yield url


@dataclass
class Scene:
    dev: RelayThread
    asgi_url: str  # web-1, backing off
    wsgi_url: str  # web-2


def running(title: str, session_id: str) -> Sessions:
    sessions = Sessions(PROFILES)
    sessions.create(session_id, "default", title)
    sessions.start_run(session_id, f"stream-{session_id}")
    return sessions


@contextmanager
def scene(store_url: str) -> Iterator[Scene]:
    """The three replicas, paired, each having published, `web-1` backing off."""
    with ExitStack() as stack:
        dev = stack.enter_context(relay_thread())
        web1 = AsgiReplica(store_url, running(HOSTILE_TITLE, "chat-1"), dev.url, "web-1")
        stack.callback(web1.close)
        with httpx.Client(base_url=web1.url, timeout=30) as client:
            # Each profile is its own relay user's (one user, one profile of a publisher).
            for token, user in (
                ("owner-token", "usr_owner"),
                ("hostile-token", "usr_hostile"),
                ("long-token", "usr_long"),
            ):
                paired = client.post(
                    "/api/talaria/relay/pair",
                    json=dev.pairing(user),
                    headers={"authorization": f"Bearer {token}"},
                )
                assert paired.status_code == 200, paired.text
        web1.flush()
        others = []
        for owner, session_id in (("web-2", "chat-2"), ("web-3", "chat-3")):
            found = ThreadedRelayService(
                store_url,
                running("a chat", session_id),
                relay_url=dev.url,
                owner=owner,
                allow_insecure_loopback=True,
                publishing=QUIET,
            )
            stack.enter_context(found)
            found.flush()
            # A second pass: its fleet row carries the first (a row holds the passes before it).
            found.changed()
            found.flush()
            others.append(found)
        wsgi_url = stack.enter_context(wsgi_served(others[0]))
        # With a long Retry-After, so web-1 is still backing off however slowly the browser
        # starts (with the 5 s of a first failure, a loaded machine saw it publishing again).
        retry = {"Retry-After": "600"}
        dev.run(lambda relay: relay.inject("snapshot", 503, times=1000, headers=retry))
        web1.backing_off()
        yield Scene(dev, web1.url, wsgi_url)
