"""The examples end to end through real HTTP: `examples/threading_server.py` (stdlib
`ThreadingHTTPServer`, the shape of Hermes WebUI) and `examples/flask_app.py`, each with the
threaded service on a real store publishing to a dev relay on loopback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import httpx
import pytest
from backends import on
from threaded_support import RelayThread, relay_thread, until
from threaded_support import wsgi_served as serve_wsgi

from examples import flask_app, threading_server
from examples.hermes import Sessions
from relay.threaded import ThreadedRelayService

pytestmark = on("sqlite", "postgres")

OWNER = {"authorization": "Bearer owner-token"}


@contextmanager
def stdlib_app(relay: ThreadedRelayService, sessions: Sessions) -> Iterator[str]:
    server = threading_server.make_server(relay, sessions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def flask_served(relay: ThreadedRelayService, sessions: Sessions) -> Iterator[str]:
    with serve_wsgi(flask_app.create_app(relay, sessions)) as url:
        yield url


Served = Callable[[ThreadedRelayService, Sessions], AbstractContextManager[str]]


def phases(dev: RelayThread, session_id: str) -> list[str]:
    return [row["phase"] for row in dev.rows() if row["sessionId"] == session_id]


@pytest.mark.parametrize("serving", [stdlib_app, flask_served], ids=["http.server", "flask"])
def test_an_example_app_publishes_end_to_end(store_url: str, serving: Served) -> None:
    """Pairing, a turn, presence, viewed and deletion, each a browser's HTTP request to the
    example app, reach the relay: one announcement, the turn's row, its acknowledgements."""
    sessions = Sessions()
    with relay_thread() as dev:
        relay = ThreadedRelayService(
            store_url, sessions, relay_url=dev.url, allow_insecure_loopback=True
        )
        with relay, serving(relay, sessions) as base, httpx.Client(base_url=base) as web:
            assert web.get("/api/talaria/relay/health").json() == {"ok": True}
            assert web.post("/api/talaria/relay/pair", json=dev.pairing()).status_code == 401
            paired = web.post("/api/talaria/relay/pair", json=dev.pairing(), headers=OWNER)
            assert paired.json() == {"ok": True, "publisher_id": "https://hermes.example"}
            body = {"id": "chat-1", "title": "Plan the launch"}
            assert web.post("/api/sessions", json=body).status_code == 401
            assert web.post("/api/sessions", json=body, headers=OWNER).json()["ok"] is True
            turn = web.post("/api/sessions/chat-1/turn", json={"stream_id": "s1"}, headers=OWNER)
            assert turn.status_code == 200
            until(lambda: phases(dev, "chat-1") == ["running"])
            beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
            presence = web.post("/api/talaria/presence", json=beat, headers=OWNER)
            assert presence.json() == {"ok": True, "lease_seconds": 90}
            end = {"stream_id": "s1", "phase": "completed"}
            assert web.post("/api/sessions/chat-1/turn/end", json=end, headers=OWNER).is_success
            until(lambda: phases(dev, "chat-1") == ["completed"])
            viewed = web.post("/api/talaria/viewed", json={"session_id": "chat-1"}, headers=OWNER)
            assert viewed.json() == {"ok": True}
            until(lambda: dev.viewed().count("chat-1") == 1)
            assert web.delete("/api/sessions/chat-1", headers=OWNER).json()["ok"] is True
            until(lambda: dev.viewed().count("chat-1") == 2)
            missing = web.delete("/api/sessions/chat-1", headers=OWNER)
            assert (missing.status_code, missing.json()) == (404, {"error": "Session not found"})
            assert dev.started() == ["chat-1"]
            assert dev.stale() == 0
