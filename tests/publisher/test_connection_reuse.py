"""Connections to the relay are kept and reused: a PUT's answer is read to its end (and dropped)
so that httpx pools its connection, and a pass, or many, open no more connections than requests
in flight. To a relay 50 to 100 ms away over TLS, each new connection costs two round trips more.

Counted on real loopback sockets as the connections a server or proxy accepted, never timed.
"""

from __future__ import annotations

import asyncio

import pytest
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from faultserver import answer, fault_server

from benchmarks.publisher import PUBLISHER_ID, Publishing
from relay.client import RelayClient
from relay.errors import RelayHttpError, RelayPairingError
from relay.protocol import compact
from relay.publishing.fanout import SNAPSHOT_CONCURRENCY
from relay.store import RelayStore

pytestmark = [pytest.mark.usefixtures("no_secret_leaks"), on(MEMORY)]

OK = compact({"ok": True})
THREE = ("default", "work", "home")
# More profiles than the snapshot PUTs a pass has in flight at once.
MANY = ("default", *(f"p{n}" for n in range(1, SNAPSHOT_CONCURRENCY + 3)))


async def test_puts_one_after_another_share_one_connection(
    signing_key: Ed25519PrivateKey,
) -> None:
    """Five PUTs in a row, each answered 200 with a small body, go over one connection."""
    async with (
        fault_server(answer(200, OK, close=False), keep_alive=True) as server,
        RelayClient(server.origin) as client,
    ):
        for _ in range(5):
            await client.put("/v1/x", b"{}", key=signing_key, key_id="key_x")
    assert (server.connections, len(server.requests)) == (1, 5)


async def test_puts_side_by_side_open_a_connection_each_and_keep_it(
    signing_key: Ed25519PrivateKey,
) -> None:
    """Three rounds of `SNAPSHOT_CONCURRENCY` PUTs at once open no more connections than one
    round has requests: the later rounds go over the first round's."""
    async with (
        fault_server(answer(200, OK, close=False), keep_alive=True) as server,
        RelayClient(server.origin) as client,
    ):
        for _ in range(3):
            await asyncio.gather(
                *(
                    client.put(f"/v1/x{n}", b"{}", key=signing_key, key_id="key_x")
                    for n in range(SNAPSHOT_CONCURRENCY)
                )
            )
    assert len(server.requests) == 3 * SNAPSHOT_CONCURRENCY
    assert 1 <= server.connections <= SNAPSHOT_CONCURRENCY


async def test_a_refused_put_closes_its_connection_unread(signing_key: Ed25519PrivateKey) -> None:
    """A PUT's refusal is not read (as upstream): its connection closes, and the next request
    opens another, the refusal mapped as before."""
    async with (
        fault_server(answer(503, OK, "Retry-After: 7", close=False), keep_alive=True) as server,
        RelayClient(server.origin) as client,
    ):
        for _ in range(2):
            with pytest.raises(RelayHttpError) as raised:
                await client.put("/v1/x", b"{}", key=signing_key, key_id="key_x")
            assert (raised.value.status, raised.value.retry_after) == (503, 7.0)
    assert (server.connections, len(server.requests)) == (2, 2)


async def test_passes_of_many_profiles_keep_their_connections(store: RelayStore) -> None:
    """With the dev relay served over HTTP, pairing more profiles than a pass has PUTs in flight
    and three passes that each send every profile's snapshot open at most one connection per
    PUT in flight, in all (upstream's way, a connection per PUT: 10 a pass)."""
    async with Publishing(store, 0, profiles=MANY, relay_rtt_ms=0.0) as bench:
        counts = bench.relay_counts
        assert counts is not None
        sent = len(bench.relay.requests)
        for _ in range(3):
            assert (await bench.steady())["failed"] is False
        snapshots = [r for r in bench.relay.requests[sent:] if r.route == "snapshot"]
        assert [r.status for r in snapshots] == [200] * 3 * len(MANY)
        assert 1 <= counts.connections <= SNAPSHOT_CONCURRENCY


async def test_pairing_answers_and_refusals_leave_their_connection_to_the_next_request(
    store: RelayStore,
) -> None:
    """Registering, enrolling two profiles, a refused enrollment (its reason read) and a pass,
    over HTTP to the dev relay, open no more connections than the pass's three PUTs in flight:
    a redeem's answer, 2xx or refusal, is read whole and its connection kept."""
    async with Publishing(store, 0, profiles=THREE, relay_rtt_ms=0.0) as bench:
        counts, config = bench.relay_counts, await store.load_config()
        assert counts is not None
        assert config is not None
        with pytest.raises(RelayPairingError, match=r"HTTP 400"):
            await bench.service.pair(
                {
                    "relay_url": config.url,
                    "publisher_id": PUBLISHER_ID,
                    "publisher_invitation": "inv_unknown",
                },
                "work",
                operator=False,
            )
        assert (await bench.steady())["failed"] is False
        routes = [(r.route, r.status) for r in bench.relay.requests]
        assert routes.count(("profile_redeem", 400)) == 1
        assert routes.count(("snapshot", 200)) >= 2 * len(THREE)
        assert 1 <= counts.connections <= len(THREE)
