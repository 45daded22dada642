"""Django for real: the project in tests/django_site, served over real HTTP through WSGI
(werkzeug's threaded server, the threaded service) and through ASGI (uvicorn, the async
service), publishes end to end to a dev relay on loopback, and serves the operator page to the
owner only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from backends import on
from django_site import asgi as django_asgi
from django_site import wsgi as django_wsgi
from django_site.site import OnLoop, wire
from threaded_support import RelayThread, relay_thread, until
from threaded_support import wsgi_served as serve_wsgi

from examples.hermes import Sessions
from relay.service import RelayService
from relay.store import open_store
from relay.testing import serve
from relay.threaded import ThreadedRelayService
from relay.threaded.host import OffLoopHost

pytestmark = on("sqlite", "postgres")

OWNER = {"authorization": "Bearer owner-token"}
MEMBER = {"authorization": "Bearer member-token"}
PAGE = "/api/talaria/relay/operator"


def phases(dev: RelayThread, session_id: str) -> list[str]:
    return [row["phase"] for row in dev.rows() if row["sessionId"] == session_id]


@contextmanager
def wsgi_served(relay: ThreadedRelayService) -> Iterator[str]:
    with serve_wsgi(django_wsgi.application(lambda: relay)) as url:
        yield url


Call = Callable[..., httpx.Response]


def publish_end_to_end(dev: RelayThread, get: Call, post: Call, delete: Call) -> None:
    """Pairing, a turn, its end, viewed and deletion through the Django app reach the relay."""
    assert get("/api/talaria/relay/health").json() == {"ok": True}
    assert post("/api/talaria/relay/pair", dev.pairing()).status_code == 401
    paired = post("/api/talaria/relay/pair", dev.pairing(), OWNER)
    assert paired.json() == {"ok": True, "publisher_id": "https://hermes.example"}
    body = {"id": "chat-1", "title": "Plan the launch"}
    assert post("/api/sessions", body).status_code == 401
    assert post("/api/sessions", body, OWNER).json() == {"ok": True}
    assert post("/api/sessions/chat-1/turn", {"stream_id": "s1"}, OWNER).status_code == 200
    until(lambda: phases(dev, "chat-1") == ["running"])
    end = {"stream_id": "s1", "phase": "completed"}
    assert post("/api/sessions/chat-1/turn/end", end, OWNER).is_success
    until(lambda: phases(dev, "chat-1") == ["completed"])
    assert post("/api/talaria/viewed", {"session_id": "chat-1"}, OWNER).json() == {"ok": True}
    until(lambda: dev.viewed().count("chat-1") == 1)
    assert delete("/api/sessions/chat-1", OWNER).json() == {"ok": True}
    until(lambda: dev.viewed().count("chat-1") == 2)
    assert dev.started() == ["chat-1"]
    # The operator page: nobody 401, a member 403, the owner the page and its JSON.
    assert get(PAGE).status_code == 401
    assert get(PAGE, MEMBER).status_code == 403
    page = get(PAGE, OWNER)
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    assert "https://hermes.example" in page.text
    twin = get(PAGE + ".json", OWNER).json()
    assert twin["registration"]["publisher_id"] == "https://hermes.example"
    assert twin["profiles"][0]["name"] == "default"


def test_django_under_wsgi_publishes_and_serves_the_page(store_url: str) -> None:
    """Django behind `relay.wsgi.middleware`, under werkzeug's threaded server."""
    sessions = Sessions()
    with relay_thread() as dev:
        relay = ThreadedRelayService(
            store_url, sessions, relay_url=dev.url, allow_insecure_loopback=True
        )
        wire(sessions, relay)
        with relay, wsgi_served(relay) as base, httpx.Client(base_url=base) as web:
            publish_end_to_end(
                dev,
                lambda path, headers=None: web.get(path, headers=headers),
                lambda path, body, headers=None: web.post(path, json=body, headers=headers),
                lambda path, headers=None: web.delete(path, headers=headers),
            )


async def test_django_under_asgi_publishes_and_serves_the_page(store_url: str) -> None:
    """Django behind `relay.asgi`'s routes, under uvicorn on this event loop; the views (run in
    Django's thread) reach the async service on the loop."""
    sessions = Sessions()
    with relay_thread() as dev, ThreadPoolExecutor(4) as pool:
        async with open_store(store_url) as store:
            service = RelayService(
                store, OffLoopHost(sessions, pool), relay_url=dev.url, allow_insecure_loopback=True
            )
            await service.start()
            wire(sessions, OnLoop(service))
            try:
                app = django_asgi.application(lambda: service)
                async with serve(app) as base, httpx.AsyncClient(base_url=base) as web:

                    def run(request: httpx.Request) -> httpx.Response:
                        # The checks block (they poll the relay): each request is a coroutine
                        # run on this loop from the checks' own thread.
                        return asyncio.run_coroutine_threadsafe(web.send(request), loop).result(30)

                    loop = asyncio.get_running_loop()
                    await asyncio.to_thread(
                        publish_end_to_end,
                        dev,
                        lambda path, headers=None: run(
                            web.build_request("GET", path, headers=headers)
                        ),
                        lambda path, body, headers=None: run(
                            web.build_request("POST", path, json=body, headers=headers)
                        ),
                        lambda path, headers=None: run(
                            web.build_request("DELETE", path, headers=headers)
                        ),
                    )
            finally:
                await service.stop()


@pytest.fixture(autouse=True)
def unwired() -> Iterator[None]:
    yield
    wire(Sessions(), None)
