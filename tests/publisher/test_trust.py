"""Whom the publisher talks to, and what its signature vouches for.

The relay origin allow-list (one trusted origin) is enforced before any network call: pairing
with another origin, or a stored registration naming another relay, never opens a connection.
The signature covers exactly the path and the body that go on the wire: the dev relay (which
verifies as the real one does) refuses a request whose path or body changed by one character.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from backends import MEMORY, on
from harness import RELAY_URL, Env, relay_env

from relay import PublisherOptions
from relay.client import RelayClient
from relay.errors import RelayHttpError, RelayPairingError
from relay.protocol import compact, snapshot_path
from relay.publishing.signing import load_key
from relay.service import RelayService
from relay.store import RelayStore

UNTRUSTED = [
    "https://evil.example",
    "https://relay.example.evil.example",
    "https://relay.example:8443",
    "https://RELAY.example",  # compared as typed, like upstream
    "http://relay.example",
]

# Trust does not depend on the store: one backend is enough, the memory store.
pytestmark = on(MEMORY)


@pytest.mark.parametrize("relay_url", UNTRUSTED)
async def test_pairing_with_an_untrusted_origin_opens_no_connection(
    store: RelayStore, relay_url: str
) -> None:
    """Registering, or enrolling a profile once registered, with any origin but the trusted one
    fails with 400 before a single request reaches the transport."""
    async with relay_env(store, profiles=("default", "work")) as env:
        for register in (True, False):
            before = await store.load_config()
            with pytest.raises(RelayPairingError) as raised:
                await env.pair("default" if register else "work", relay_url=relay_url)
            assert raised.value.status == 400
            assert env.wire.attempts == []
            assert await store.load_config() == before
            if register:
                await env.pair()  # registered with the trusted relay, for the enrollment
                env.wire.attempts.clear()


async def test_a_registration_with_another_relay_is_never_published_to(
    store: RelayStore,
) -> None:
    """A server that trusts another relay than the one its stored registration names (the
    setting changed, or the store came from elsewhere) starts no publisher and sends nothing,
    saying why in one line."""
    async with relay_env(store) as env:
        await env.pair()
        env.wire.attempts.clear()
        logs: list[str] = []
        service = RelayService(
            store,
            env.host,
            relay_url="https://relay2.example",
            http=env.http,
            clock=env.clock,
            log=logs.append,
            publishing=PublisherOptions(background=False),
        )
        assert await service.start() is False
        service.changed()
        await service.flush()
        await service.stop()
        assert logs == [
            "[relay] Talaria relay publisher disabled: invalid configuration (registered with "
            "https://relay.example, not the trusted relay https://relay2.example)"
        ]
        assert env.wire.attempts == []


Change = Callable[[bytes, bytes], tuple[bytes, bytes]]


class Tamper(httpx.AsyncBaseTransport):
    """Changes each request's raw path and body after signing, on its way to the relay."""

    def __init__(self, inner: httpx.AsyncBaseTransport, change: Change) -> None:
        self.inner = inner
        self.change = change

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path, body = self.change(request.url.raw_path, request.content)
        url = request.url.copy_with(raw_path=path)
        changed = httpx.Request(request.method, url, headers=request.headers, content=body)
        return await self.inner.handle_async_request(changed)


@pytest.mark.parametrize(
    ("change", "status"),
    [
        (lambda path, body: (path, body), 200),
        (lambda path, body: (path.replace(b"%3A", b"%3a", 1), body), 401),  # same route
        (lambda path, body: (path, body.replace(b'"sig', b'"Sig', 1)), 401),  # same length
        (lambda path, body: (path, body + b" "), 401),  # the same JSON
        (lambda path, body: (path + b"?x=1", body), 200),  # the relay verifies the pathname
    ],
    ids=["untouched", "path-escape-case", "body-byte", "body-space", "query"],
)
async def test_the_signature_covers_exactly_the_path_and_body_sent(
    store: RelayStore, change: Change, status: int
) -> None:
    """A signed snapshot reaches the relay untouched: accepted. One character of its path or
    body changed on the way (even one the relay routes or parses the same): refused, 401. The
    query string, which the publisher never sends, is outside the signature as on the relay."""
    async with relay_env(store) as env:
        await env.pair()
        env.wire.inner = Tamper(env.wire.inner, change)
        if status == 200:
            await put_snapshot(env)
        else:
            with pytest.raises(RelayHttpError, match=f"HTTP {status}"):
                await put_snapshot(env)
        assert env.sent("snapshot")[-1].status == status


async def put_snapshot(env: Env) -> None:
    """A snapshot signed with the registration's key, as the publisher sends it."""
    config = await env.config()
    key = load_key(await env.store.load_key(config.key_ref))
    client = RelayClient(RELAY_URL, http=env.http, clock=env.clock)
    path = snapshot_path(config.publisher_id, config.profiles["default"].profile_id)
    body = compact({"snapshotId": "signed", "states": []})
    await client.put(path, body, key=key, key_id=config.key_id)
