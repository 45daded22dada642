"""The real publisher sends exactly the shared contract fixtures (upstream relay.contract.test)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from relay import PublisherOptions
from relay.client import RelayClient
from relay.presence import Presence
from relay.protocol import PRESENCE_FENCE_MS, PRESENCE_LEASE_MS, PRESENCE_MAX_TABS
from relay.publishing.publisher import RelayPublisher
from relay.store import ProfileGrant, RelayConfig, RelayStore
from relay.testing.memory import MemoryHost

pytestmark = on(MEMORY)

FIXTURES = Path(__file__).parents[1] / "fixtures"
NOW = 1_800_000_000.0
PUBLISHER = "https://contract.example"


def fixture_bytes(name: str) -> bytes:
    return json.dumps(json.loads((FIXTURES / name).read_text()), separators=(",", ":")).encode()


async def contract_publisher(
    store: RelayStore, host: MemoryHost, sent: list[httpx.Request]
) -> RelayPublisher:
    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"status": "accepted"})

    pem = Ed25519PrivateKey.generate().private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()
    )
    key_ref = await store.save_key("contract-key", pem.decode())
    identity = await store.profile_identity("default")
    config = RelayConfig(
        "https://relay.example",
        PUBLISHER,
        "contract-key",
        key_ref,
        {"default": ProfileGrant(identity, "prf_default")},
    )
    await store.save_config(config)
    http = httpx.AsyncClient(transport=httpx.MockTransport(record))
    publisher = RelayPublisher(
        config,
        store=store,
        host=host,
        client=RelayClient(config.url, http=http, clock=lambda: NOW),
        presence=Presence(store, lambda: NOW),
        owner="contract",
        clock=lambda: NOW,
        options=PublisherOptions(
            new_id=lambda: "00000000000000000000000000000001", background=False
        ),
    )
    await publisher.initialize()
    return publisher


async def test_publishes_exactly_the_shared_snapshot_fixture(store: RelayStore) -> None:
    """`publishes exactly the shared publisher-snapshot fixture`: same path, byte-equal body."""
    host = MemoryHost(clock=lambda: NOW)
    host.create_session("contract-session", title="Contract fixture")
    host.start_run("contract-session", "contract-stream")
    await store.apply_presence(
        "default",
        "tab_contract",
        1,
        True,
        int(NOW * 1000),
        lease_ms=PRESENCE_LEASE_MS,
        fence_ms=PRESENCE_FENCE_MS,
        max_tabs=PRESENCE_MAX_TABS,
    )
    sent: list[httpx.Request] = []
    publisher = await contract_publisher(store, host, sent)
    await publisher.publish_snapshot()
    (request,) = sent
    assert (
        request.url.raw_path
        == b"/v1/publishers/https%3A%2F%2Fcontract.example/profiles/prf_default/snapshot"
    )
    assert request.content == fixture_bytes("publisher-snapshot.json")


async def test_announces_exactly_the_shared_session_started_fixture(store: RelayStore) -> None:
    """The first announcement of a new session is the publisher-session-started fixture."""
    host = MemoryHost(clock=lambda: NOW)
    sent: list[httpx.Request] = []
    publisher = await contract_publisher(store, host, sent)
    host.create_session("contract-session", title="Contract fixture")
    await publisher.publish_started()
    (request,) = sent
    assert request.url.raw_path == (
        b"/v1/publishers/https%3A%2F%2Fcontract.example/profiles/prf_default"
        b"/sessions/contract-session/started"
    )
    assert request.content == fixture_bytes("publisher-session-started.json")
