"""`relay.asgi`: the browser-facing routes, through `httpx.ASGITransport` and once under uvicorn."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from backends import MEMORY, on
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env
from hostile import HOSTILE, HOSTILE_PATHS
from starlette.applications import Starlette
from starlette.requests import Request

from relay.asgi import MAX_BODY, Caller, Refused, app, routes
from relay.errors import (
    CorruptStateError,
    InvalidInputError,
    RelayError,
    RelayUnreachableError,
    SchemaError,
    StaleConfigError,
    StoreUnavailableError,
)
from relay.service import RelayService
from relay.store import RelayStore
from relay.testing import serve

pytestmark = on(MEMORY)

OPERATOR_ONLY = "Talaria Relay pairing requires an operator session"


async def identify(request: Request) -> Caller | None:
    """The test app's auth: headers name the profile and the owner; `x-refuse` is a 403."""
    if "x-refuse" in request.headers:
        raise Refused(OPERATOR_ONLY, 403)
    profile = request.headers.get("x-profile")
    if profile is None:
        return None
    return Caller(profile, operator=request.headers.get("x-operator") == "1")


OWNER = {"x-profile": "default", "x-operator": "1"}


@asynccontextmanager
async def web(env: Env) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a Starlette app that holds the relay routes, in process."""
    web_app = Starlette(routes=routes(env.service, identify))
    transport = httpx.ASGITransport(app=web_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://web.test") as client:
        yield client


def pairing(env: Env, **fields: Any) -> dict[str, Any]:
    return {
        "relay_url": RELAY_URL,
        "publisher_id": PUBLISHER_ID,
        "publisher_invitation": env.relay.mint_invitation("usr_owner"),
        **fields,
    }


async def test_pair_registers_the_server(store: RelayStore) -> None:
    """The owner's pairing request registers the server and answers upstream's body."""
    async with relay_env(store) as env, web(env) as client:
        response = await client.post("/api/talaria/relay/pair", json=pairing(env), headers=OWNER)
        assert response.status_code == 200
        assert response.json() == {"ok": True, "publisher_id": PUBLISHER_ID}
        assert env.service.current() is not None


@pytest.mark.parametrize(
    ("case", "status", "message"),
    [
        ("not an object", 400, "Invalid pairing request"),
        ("missing field", 400, "Missing relay pairing fields"),
        ("untrusted relay", 400, "Untrusted Talaria Relay origin"),
        ("unknown profile", 403, "Hermes profile is unavailable"),
        ("not the owner", 409, "An owner must register this Hermes server"),
        ("relay refuses", 409, "Talaria Relay rejected server registration (HTTP 403)"),
        ("relay unreachable", 502, "Could not reach Talaria Relay"),
    ],
)
async def test_pair_errors_answer_with_their_status(
    store: RelayStore, case: str, status: int, message: str
) -> None:
    """Each pairing failure answers its `RelayPairingError` status and `{"error": message}`."""
    async with relay_env(store) as env, web(env) as client:
        body: object = pairing(env)
        headers = OWNER
        if case == "not an object":
            body = ["relay_url"]
        elif case == "missing field":
            body = pairing(env, publisher_invitation=None)
        elif case == "untrusted relay":
            body = pairing(env, relay_url="https://evil.example")
        elif case == "unknown profile":
            headers = {"x-profile": "nobody", "x-operator": "1"}
        elif case == "not the owner":
            headers = {"x-profile": "default"}
        elif case == "relay refuses":
            env.wire.answer("publisher_redeem", 403, {"error": "invalid_invitation"})
        elif case == "relay unreachable":
            env.wire.fail("publisher_redeem", httpx.ConnectError)
        response = await client.post("/api/talaria/relay/pair", json=body, headers=headers)
        assert response.status_code == status
        assert response.json()["error"].startswith(message)
        assert await store.load_config() is None


async def test_presence_grants_and_revokes_a_lease(store: RelayStore) -> None:
    """A tab's heartbeat gets a 90 s lease, its revoke 0, as upstream answers."""
    async with relay_env(store) as env, web(env) as client:
        beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
        response = await client.post("/api/talaria/presence", json=beat, headers=OWNER)
        assert (response.status_code, response.json()) == (200, {"ok": True, "lease_seconds": 90})
        revoke = {**beat, "active": False, "seq": 2}
        response = await client.post("/api/talaria/presence", json=revoke, headers=OWNER)
        assert (response.status_code, response.json()) == (200, {"ok": True, "lease_seconds": 0})


@pytest.mark.parametrize(
    ("body", "profile", "status", "message"),
    [
        ({"tab_id": "short", "active": True, "seq": 1}, "default", 400, "Invalid presence request"),
        (
            {"tab_id": "tab-00001", "active": 1, "seq": 1},
            "default",
            400,
            "Invalid presence request",
        ),
        (
            {"tab_id": "tab-00001", "active": True, "seq": -1},
            "default",
            400,
            "Invalid presence request",
        ),
        ("tab-00001", "default", 400, "Invalid presence request"),
        (
            {"tab_id": "tab-00001", "active": True, "seq": 1},
            " ",
            403,
            "Hermes profile is unavailable",
        ),
    ],
)
async def test_presence_rejects_what_upstream_rejects(
    store: RelayStore, body: object, profile: str, status: int, message: str
) -> None:
    """A malformed heartbeat is 400 and an empty profile 403, with upstream's messages."""
    async with relay_env(store) as env, web(env) as client:
        headers = {"x-profile": profile}
        response = await client.post("/api/talaria/presence", json=body, headers=headers)
        assert (response.status_code, response.json()) == (status, {"error": message})


async def test_viewed_acknowledges_a_known_session(store: RelayStore) -> None:
    """Viewing a session of a paired server answers `{"ok": true}` and queues its ack."""
    async with relay_env(store) as env, web(env) as client:
        await env.pair()
        env.host.create_session("chat-1", "default", "Plan")
        response = await client.post(
            "/api/talaria/viewed", json={"session_id": "chat-1"}, headers=OWNER
        )
        assert (response.status_code, response.json()) == (200, {"ok": True})
        response = await client.post(
            "/api/talaria/viewed", json={"session_id": "chat-404"}, headers=OWNER
        )
        assert (response.status_code, response.json()) == (404, {"error": "Session not found"})


@pytest.mark.parametrize("body", [{}, {"session_id": 7}, {"session_id": ""}, ["chat-1"], "chat-1"])
async def test_viewed_rejects_a_missing_session_id(store: RelayStore, body: object) -> None:
    """A viewed request without a session id string is 400, paired or not."""
    async with relay_env(store) as env, web(env) as client:
        response = await client.post("/api/talaria/viewed", json=body, headers=OWNER)
        assert response.status_code == 400
        assert "error" in response.json()


async def test_viewed_without_a_publisher_does_nothing(store: RelayStore) -> None:
    """Before pairing, viewing is a no-op that still answers `{"ok": true}`, as upstream."""
    async with relay_env(store) as env, web(env) as client:
        response = await client.post(
            "/api/talaria/viewed", json={"session_id": "chat-1"}, headers=OWNER
        )
        assert (response.status_code, response.json()) == (200, {"ok": True})


async def test_a_refused_caller_changes_nothing(store: RelayStore) -> None:
    """No caller is 401; a `Refused` is its own status and message; neither pairs."""
    async with relay_env(store) as env, web(env) as client:
        response = await client.post("/api/talaria/relay/pair", json=pairing(env))
        assert (response.status_code, response.json()) == (401, {"error": "Not authorized."})
        response = await client.post(
            "/api/talaria/relay/pair", json=pairing(env), headers={"x-refuse": "1"}
        )
        assert (response.status_code, response.json()) == (403, {"error": OPERATOR_ONLY})
        assert await store.load_config() is None


async def test_bodies_that_are_not_json_objects(store: RelayStore) -> None:
    """Bad JSON is 400, a body over the cap 413 (declared or streamed), not JSON 415."""
    async with relay_env(store) as env, web(env) as client:
        json_type = {**OWNER, "content-type": "application/json"}
        path = "/api/talaria/presence"
        response = await client.post(path, content=b"{not json", headers=json_type)
        assert (response.status_code, response.json()) == (400, {"error": "Invalid JSON body"})
        big = b'{"pad": "' + b"x" * MAX_BODY + b'"}'
        response = await client.post(path, content=big, headers=json_type)
        assert response.status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(MAX_BODY // 1024 + 2):
                yield b" " * 1024

        response = await client.post(path, content=chunks(), headers=json_type)
        assert response.status_code == 413
        form = {**OWNER, "content-type": "application/x-www-form-urlencoded"}
        response = await client.post(path, content=b"tab_id=x", headers=form)
        assert response.status_code == 415


@pytest.mark.parametrize("path", HOSTILE_PATHS)
async def test_hostile_bodies_never_answer_500(store: RelayStore, path: str) -> None:
    """No body a client can send makes a route answer 5xx or anything but a JSON object."""
    async with relay_env(store) as env, web(env) as client:
        await env.pair()  # so viewed reaches the service's own checks
        headers = {**OWNER, "content-type": "application/json"}
        for body in HOSTILE:
            response = await client.post(path, content=body, headers=headers)
            assert response.status_code < 500, (body[:60], response.text)
            assert isinstance(response.json(), dict)
        odd_profile = {b"x-profile": b"\xff\x00", b"x-operator": b"1"}  # an app passing it on
        response = await client.post(path, json={}, headers=odd_profile)
        assert response.status_code < 500


async def test_a_store_outage_is_503(store: RelayStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that cannot be reached answers 503, not 500."""

    async def unreachable(*args: object, **kwargs: object) -> None:
        raise StoreUnavailableError("connection refused")

    monkeypatch.setattr(store, "apply_presence", unreachable)
    async with relay_env(store) as env, web(env) as client:
        beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
        response = await client.post("/api/talaria/presence", json=beat, headers=OWNER)
        assert response.status_code == 503
        assert response.json() == {"error": "The relay store is unavailable"}


async def test_health_follows_the_store(store: RelayStore) -> None:
    """Health is 200 while the store answers, 503 once it is closed or before the service exists."""
    async with relay_env(store) as env, web(env) as client:
        response = await client.get("/api/talaria/relay/health")
        assert (response.status_code, response.json()) == (200, {"ok": True})
        await store.close()
        response = await client.get("/api/talaria/relay/health")
        assert response.status_code == 503
        assert response.json()["ok"] is False
    started: list[RelayService] = []
    mounted = Starlette()
    mounted.mount("/api/talaria", app(lambda: started[0] if started else None, identify))
    transport = httpx.ASGITransport(app=mounted)
    async with httpx.AsyncClient(transport=transport, base_url="http://web.test") as client:
        response = await client.get("/api/talaria/relay/health")
        assert response.status_code == 503
        response = await client.post("/api/talaria/presence", json={}, headers=OWNER)
        assert response.status_code == 503


async def test_the_routes_under_uvicorn(store: RelayStore) -> None:
    """Mounted in an app served by uvicorn on loopback, pairing and presence work over HTTP."""
    async with relay_env(store) as env:
        mounted = Starlette()
        mounted.mount("/api/talaria", app(env.service, identify))
        async with serve(mounted) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            response = await client.post(
                "/api/talaria/relay/pair", json=pairing(env), headers=OWNER
            )
            assert (response.status_code, response.json()["ok"]) == (200, True)
            beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
            response = await client.post("/api/talaria/presence", json=beat, headers=OWNER)
            assert response.json() == {"ok": True, "lease_seconds": 90}
            response = await client.post(
                "/api/talaria/presence",
                content=b"x" * (MAX_BODY + 1),
                headers={**OWNER, "content-type": "application/json"},
            )
            assert response.status_code == 413
            assert (await client.get("/api/talaria/relay/health")).status_code == 200


def test_relay_imports_without_starlette() -> None:
    """`import relay` needs no Starlette; `import relay.asgi` names the extra to install."""
    script = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "import relay, relay.service\n"
        "try:\n"
        "    import relay.asgi\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'talaria-relay[web]'" in result.stdout


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidInputError("profile must be a string"), 400),
        (StaleConfigError(), 409),
        (StoreUnavailableError(), 503),
        (SchemaError(), 503),
        (CorruptStateError(), 500),
        (RelayUnreachableError(), 502),
        (RelayError(), 500),
    ],
)
async def test_service_errors_map_to_statuses(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch, error: RelayError, status: int
) -> None:
    """Each error of the `relay.errors` tree answers its status, with a JSON error body."""

    async def failing(*args: object, **kwargs: object) -> dict[str, Any]:
        raise error

    async with relay_env(store) as env, web(env) as client:
        monkeypatch.setattr(env.service, "pair", failing)
        response = await client.post("/api/talaria/relay/pair", json=pairing(env), headers=OWNER)
        assert response.status_code == status
        assert set(response.json()) == {"error"}


def test_arguments_the_app_gets_wrong_fail_at_once() -> None:
    """A bad prefix, body cap or `Caller` fails where the app makes it, not per request."""
    with pytest.raises(InvalidInputError):
        routes(lambda: None, identify, prefix="api/talaria")
    with pytest.raises(InvalidInputError):
        routes(lambda: None, identify, max_body=0)
    with pytest.raises(TypeError):
        Caller("default", operator="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="4xx"):
        Refused("teapot", 500)
