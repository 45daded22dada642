"""`relay.wsgi`: the browser routes over the threaded service, answering as `relay.asgi` does."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from flask import Flask
from hostile import HOSTILE, HOSTILE_PATHS
from starlette.applications import Starlette
from starlette.requests import Request
from threaded_support import RelayThread, relay_thread
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from relay import asgi, wsgi
from relay.errors import InvalidInputError
from relay.routes import MAX_BODY, Caller, Refused
from relay.service import RelayService
from relay.store import open_store
from relay.testing import MemoryHost
from relay.threaded import ThreadedRelayService

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

OPERATOR_ONLY = "Talaria Relay pairing requires an operator session"
OWNER = {"x-profile": "default", "x-operator": "1"}
JSON = {**OWNER, "content-type": "application/json"}


def who(headers: dict[str, str]) -> Caller | None:
    """The test apps' auth, one rule for both faces: headers name the profile and the owner;
    `x-refuse` is a 403, or the status it names."""
    if "x-refuse" in headers:
        raise Refused(
            OPERATOR_ONLY, int(headers["x-refuse"]) if headers["x-refuse"] != "1" else 403
        )
    profile = headers.get("x-profile")
    return None if profile is None else Caller(profile, operator=headers.get("x-operator") == "1")


async def identify_asgi(request: Request) -> Caller | None:
    return who(dict(request.headers))


def identify_wsgi(environ: WSGIEnvironment) -> Caller | None:
    return who(
        {k[5:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
    )


@pytest.fixture
def dev() -> Iterator[RelayThread]:
    with relay_thread() as relay:
        yield relay


@pytest.fixture
def threaded(dev: RelayThread) -> Iterator[ThreadedRelayService]:
    """A paired threaded service on a memory store, publishing to the dev relay."""
    host = MemoryHost(["default"])
    service = ThreadedRelayService(
        "memory://", host, relay_url=dev.url, allow_insecure_loopback=True
    )
    service.start()
    service.pair(
        {**dev.pairing(), "publisher_id": "https://wsgi.example"}, "default", operator=True
    )
    yield service
    service.stop()


@pytest.fixture
def client(threaded: ThreadedRelayService) -> Iterator[httpx.Client]:
    transport = httpx.WSGITransport(app=wsgi.Router(threaded, identify_wsgi))
    with httpx.Client(transport=transport, base_url="http://web.test") as client:
        yield client


@asynccontextmanager
async def asgi_client(dev: RelayThread) -> AsyncIterator[httpx.AsyncClient]:
    """The same routes through `relay.asgi` and a paired async service on a memory store."""
    async with open_store("memory://") as store:
        service = RelayService(
            store, MemoryHost(["default"]), relay_url=dev.url, allow_insecure_loopback=True
        )
        await service.start()
        await service.pair(dev.pairing(), "default", operator=True)
        app = Starlette(routes=asgi.routes(service, identify_asgi))
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://web.test") as c:
                yield c
        finally:
            await service.stop()


def requests() -> Iterable[tuple[str, str, dict[str, str], bytes]]:
    """Every hostile body on every route, and the requests each rule of the table answers."""
    for path in HOSTILE_PATHS:
        for body in HOSTILE:
            yield "POST", path, JSON, body
    presence = b'{"tab_id": "tab-00001", "active": true, "seq": 1}'
    yield "POST", "/api/talaria/presence", JSON, presence
    yield "POST", "/api/talaria/presence", {"content-type": "application/json"}, presence
    yield "POST", "/api/talaria/presence", {**JSON, "x-refuse": "1"}, presence
    yield "POST", "/api/talaria/presence", {**JSON, "x-refuse": "499"}, presence
    yield "POST", "/api/talaria/presence", {**OWNER, "content-type": "text/plain"}, presence
    yield "POST", "/api/talaria/presence", JSON, b'{"pad": "' + b"x" * MAX_BODY + b'"}'
    yield "POST", "/api/talaria/presence", {**JSON, "x-profile": " "}, presence
    yield "POST", "/api/talaria/viewed", JSON, b'{"session_id": "chat-404"}'
    yield "POST", "/api/talaria/relay/pair", {**JSON, "x-operator": "0"}, b"{}"
    yield "GET", "/api/talaria/relay/health", {}, b""


async def test_wsgi_and_asgi_answer_alike(dev: RelayThread, client: httpx.Client) -> None:
    """The hostile-body table and each rule's request get the same status and body from both
    faces; none is a 5xx."""
    async with asgi_client(dev) as async_client:
        for method, path, headers, body in requests():
            expected = await async_client.request(method, path, headers=headers, content=body)
            # A thread, as a WSGI server would call it: the async service's loop runs on.
            got = await asyncio.to_thread(
                client.request, method, path, headers=headers, content=body
            )
            shown = (method, path, body[:40])
            assert (got.status_code, got.json()) == (expected.status_code, expected.json()), shown
            assert got.status_code < 500, shown
            assert got.headers["content-type"] == "application/json"


class Statuses(list[str]):
    """A WSGI `start_response` that keeps each status it is given."""

    def __call__(
        self, status: str, headers: list[tuple[str, str]], exc_info: object = None
    ) -> Callable[[bytes], object]:
        self.append(status)
        return lambda _: None


def presence_environ(body: bytes, **extra: Any) -> dict[str, Any]:
    """A presence POST as a WSGI server hands it over, its body ended by the server."""
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/talaria/presence",
        "CONTENT_TYPE": "application/json",
        "HTTP_X_PROFILE": "default",
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        **extra,
    }


def test_a_streamed_body_over_the_cap_is_413(threaded: ThreadedRelayService) -> None:
    """Without a Content-Length (a chunked body the server ends), reading stops past the cap."""
    router = wsgi.Router(threaded, identify_wsgi)
    answers = Statuses()
    big = b" " * (MAX_BODY + 1)
    b"".join(router(presence_environ(big), answers))
    beat = b'{"tab_id": "tab-00001", "active": true, "seq": 1}'
    reply = b"".join(router(presence_environ(beat), answers))
    b"".join(router(presence_environ(beat[:10], CONTENT_LENGTH=str(len(beat))), answers))
    assert answers == ["413 Request Entity Too Large", "200 OK", "400 Bad Request"]
    assert reply == b'{"ok": true, "lease_seconds": 90}'


@pytest.mark.parametrize("declared", ["²", "١٢", "+5", " 5", "5 ", "-1", "0x10"])
def test_a_content_length_of_anything_but_ascii_digits_is_400(
    threaded: ThreadedRelayService, declared: str
) -> None:
    """A Content-Length a WSGI server passes through as it came (latin-1 decoded): not ASCII
    digits, it is refused as invalid, never a 500."""
    answers = Statuses()
    environ = presence_environ(b"{}", CONTENT_LENGTH=declared)
    reply = b"".join(wsgi.Router(threaded, identify_wsgi)(environ, answers))
    assert answers == ["400 Bad Request"]
    assert b"Invalid Content-Length" in reply


def test_other_paths_and_methods(client: httpx.Client, threaded: ThreadedRelayService) -> None:
    """A route's other method is 405 with Allow; an unknown path 404 alone, or the wrapped app's."""
    response = client.get("/api/talaria/presence", headers=OWNER)
    assert (response.status_code, response.headers["allow"]) == (405, "POST")
    assert client.get("/elsewhere").status_code == 404

    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the app"]

    app = wsgi.middleware(wrapped, threaded, identify_wsgi)
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t") as web:
        assert web.get("/elsewhere").text == "the app"
        assert web.get("/api/talaria/relay/health").json() == {"ok": True}


def test_mounted_in_flask(threaded: ThreadedRelayService) -> None:
    """As Flask middleware and as a dispatcher mount, the routes answer beside the app's own."""
    flask_app = Flask(__name__)

    @flask_app.get("/hello")
    def hello() -> str:
        return "hello"

    beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
    inner = flask_app.wsgi_app
    flask_app.wsgi_app = wsgi.middleware(inner, threaded, identify_wsgi)  # type: ignore[method-assign]
    mounted = DispatcherMiddleware(inner, {"/api/talaria": wsgi.app(threaded, identify_wsgi)})
    for app in (flask_app, mounted):
        with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t") as web:
            assert web.get("/hello").text == "hello"
            answer = web.post("/api/talaria/presence", json=beat, headers=OWNER)
            assert answer.json() == {"ok": True, "lease_seconds": 90}


def test_before_the_service_exists_it_is_503() -> None:
    """A source that has no service yet answers 503 on every route, health included."""
    router = wsgi.Router(lambda: None, identify_wsgi)
    with httpx.Client(transport=httpx.WSGITransport(app=router), base_url="http://t") as web:
        assert web.get("/api/talaria/relay/health").status_code == 503
        answer = web.post("/api/talaria/presence", json={}, headers=OWNER)
        assert answer.json() == {"error": "Talaria relay is not started"}


def test_arguments_the_app_gets_wrong_fail_at_once() -> None:
    """A bad prefix or body cap fails when the router is made."""
    with pytest.raises(InvalidInputError):
        wsgi.Router(lambda: None, identify_wsgi, prefix="api/")
    with pytest.raises(InvalidInputError):
        wsgi.app(lambda: None, identify_wsgi, max_body=0)
