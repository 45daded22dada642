"""The dev relay answers as Talaria Relay does: the relay server's own tests (spec §6.5), mirrored.

Requests are signed here with `canonical_string` and cryptography's Ed25519 directly, not with the
project's client, so these tests pin the relay side on its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from relay import testing as relay_testing
from relay.errors import InvalidInputError
from relay.protocol import b64url, canonical_string, compact, session_path, snapshot_path
from relay.testing import Clock, DevRelay, serve
from relay.testing.devrelay.validation import canonical_origin

FIXTURES = Path(__file__).parents[1] / "fixtures"
NOW = 1_800_000_000  # seconds; the fixtures' revision and updatedAt are this in milliseconds
NOW_MS = NOW * 1000
PUB = "https://pub.example"
CONTRACT = "https://contract.example"
JSON_TYPE = {"content-type": "application/json"}


def fixture(name: str) -> bytes:
    """A shared contract fixture, compact, as the publisher sends it."""
    return compact(json.loads((FIXTURES / name).read_text()))


def raw_public(key: Ed25519PrivateKey) -> str:
    return b64url(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def state(session_id: str, revision: int, phase: str = "running", **fields: Any) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "streamId": fields.pop("streamId", None),
        "eventId": f"snapshot:{revision}:{session_id}",
        "revision": revision,
        "title": "A session",
        "phase": phase,
        "updatedAt": fields.pop("updatedAt", revision),
        "deepLink": f"/sessions/{session_id}",
        **fields,
    }


@dataclass
class Publisher:
    """A registered publisher that signs what it sends, with knobs to forge each signed part."""

    client: httpx.AsyncClient
    clock: Clock
    key: Ed25519PrivateKey
    key_id: str
    publisher_id: str
    profile_id: str

    def headers(
        self, method: str, path: str, body: bytes, *, nonce: str | None = None, **signed: Any
    ) -> dict[str, str]:
        """Signed headers; `sign_method`, `sign_path`... replace what the signature covers."""
        sent = {
            "method": method,
            "path": path,
            "timestamp": str(int(self.clock())),
            "nonce": nonce or uuid.uuid4().hex,
            "body": body,
        }
        header_timestamp = signed.pop("header_timestamp", sent["timestamp"])
        covered = {**sent, "timestamp": header_timestamp}
        covered |= {name: signed[f"sign_{name}"] for name in covered if f"sign_{name}" in signed}
        message = canonical_string(
            covered["method"], covered["path"], covered["timestamp"], covered["nonce"],
            covered["body"],
        )  # fmt: skip
        return {
            **JSON_TYPE,
            "x-talaria-key-id": self.key_id,
            "x-talaria-timestamp": header_timestamp,
            "x-talaria-nonce": sent["nonce"],
            "x-talaria-signature": b64url(self.key.sign(message)),
        }

    async def send(self, method: str, path: str, body: bytes, **signed: Any) -> httpx.Response:
        headers = self.headers(method, path, body, **signed)
        return await self.client.request(method, path, content=body, headers=headers)

    async def snapshot(
        self, *states: dict[str, Any], profile_id: str | None = None, **signed: Any
    ) -> httpx.Response:
        path = snapshot_path(self.publisher_id, profile_id or self.profile_id)
        body = compact({"snapshotId": "webui:test", "states": list(states)})
        return await self.send("PUT", path, body, **signed)

    async def viewed(self, session_id: str, through: int, **signed: Any) -> httpx.Response:
        path = session_path(self.publisher_id, self.profile_id, session_id, "viewed")
        return await self.send("PUT", path, compact({"through": through}), **signed)

    async def enroll(self, invitation: str, profile_id: str, **signed: Any) -> httpx.Response:
        body = compact(
            {"invitation": invitation, "publisherId": self.publisher_id, "profileId": profile_id}
        )
        return await self.send("POST", "/v1/pairings/profile/redeem", body, **signed)


async def redeem(client: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    return await client.post(
        "/v1/pairings/publisher/redeem", content=compact(fields), headers=JSON_TYPE
    )


async def register(
    client: httpx.AsyncClient,
    relay: DevRelay,
    clock: Clock,
    publisher_id: str = PUB,
    profile_id: str = "prf_a",
    user_id: str = "usr_a",
) -> Publisher:
    key = Ed25519PrivateKey.generate()
    response = await redeem(
        client,
        invitation=relay.mint_invitation(user_id),
        publisherId=publisher_id,
        profileId=profile_id,
        label="Home",
        publicKey=raw_public(key),
    )
    assert response.status_code == 201, response.text
    data = response.json()
    return Publisher(client, clock, key, data["keyId"], data["publisherId"], data["profileId"])


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def relay(clock: Clock) -> DevRelay:
    return DevRelay(clock=clock)


@pytest.fixture
async def client(relay: DevRelay) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        yield client


@pytest.fixture
async def pub(client: httpx.AsyncClient, relay: DevRelay, clock: Clock) -> Publisher:
    return await register(client, relay, clock)


# ── signatures (crypto.test.ts) ──────────────────────────────────────────────


@pytest.mark.parametrize(
    "forged",
    [
        {"sign_method": "POST"},
        {"sign_path": snapshot_path(PUB, "prf_b")},
        {"sign_timestamp": str(NOW - 1)},
        {"sign_nonce": "another-nonce"},
        {"sign_body": b'{"snapshotId":"other","states":[]}'},
    ],
    ids=["method", "path", "timestamp", "nonce", "body"],
)
async def test_signature_binds_method_path_timestamp_nonce_and_body(
    pub: Publisher, forged: dict[str, Any]
) -> None:
    """crypto.test `binds an Ed25519 signature to the exact method, path, timestamp, nonce,
    and body`: forging any one of them gives 401."""
    assert (await pub.snapshot()).status_code == 200
    response = await pub.snapshot(**forged)
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}


@pytest.mark.parametrize(
    ("timestamp", "status"),
    [(NOW - 300, 200), (NOW + 300, 200), (NOW - 301, 401), (NOW + 301, 401)],
)
async def test_timestamps_beyond_five_minutes_are_refused(
    pub: Publisher, timestamp: int, status: int
) -> None:
    """A timestamp more than 300 s from relay time gives 401 (authenticatePublisher)."""
    response = await pub.snapshot(header_timestamp=str(timestamp))
    assert response.status_code == status


async def test_all_four_headers_are_required_and_the_nonce_is_bounded(pub: Publisher) -> None:
    """Each missing X-Talaria header, a non-integer timestamp or a 129-char nonce gives 401."""
    path = snapshot_path(PUB, pub.profile_id)
    body = compact({"snapshotId": "s", "states": []})
    for name in ("key-id", "timestamp", "nonce", "signature"):
        headers = pub.headers("PUT", path, body)
        del headers[f"x-talaria-{name}"]
        response = await pub.client.put(path, content=body, headers=headers)
        assert response.status_code == 401, name
    assert (await pub.snapshot(header_timestamp=f"{NOW}.5")).status_code == 401
    assert (await pub.snapshot(nonce="n" * 129)).status_code == 401
    assert (await pub.snapshot(nonce="n" * 128)).status_code == 200


async def test_percent_encoded_publisher_path_verifies_as_sent(
    client: httpx.AsyncClient, relay: DevRelay, clock: Clock
) -> None:
    """The signature covers the raw path: `%3A%2F%2F` (either hex case) and a port verify."""
    pub = await register(client, relay, clock, publisher_id="http://127.0.0.1:8000")
    assert (await pub.snapshot(state("s1", 1))).status_code == 200
    assert relay.requests[-1].path.startswith("/v1/publishers/http%3A%2F%2F127.0.0.1%3A8000/")
    lower = "/v1/publishers/http%3a%2f%2f127.0.0.1%3a8000/profiles/prf_a/snapshot"
    response = await pub.send("PUT", lower, compact({"snapshotId": "s", "states": []}))
    assert response.status_code == 200
    assert relay.requests[-1].path == lower


# ── shared contracts (sharedContracts.test.ts) ───────────────────────────────


@pytest.fixture
async def contract(client: httpx.AsyncClient, relay: DevRelay, clock: Clock) -> Publisher:
    return await register(client, relay, clock, CONTRACT, "prf_default", "contract-user")


async def test_shared_snapshot_fixture_signed_now_is_accepted(
    contract: Publisher, relay: DevRelay
) -> None:
    """sharedContracts `accepts the Web publisher and App registration`: the fixture gives 200."""
    response = await contract.send(
        "PUT", snapshot_path(CONTRACT, "prf_default"), fixture("publisher-snapshot.json")
    )
    assert (response.status_code, response.json()) == (200, {"status": "accepted"})
    [row] = relay.rows(CONTRACT, "prf_default")
    assert (row.session_id, row.phase, row.revision) == ("contract-session", "running", NOW_MS)
    assert row.alert_eligible is False
    assert row.expires_at == NOW_MS + 3 * 60_000


def started_variant(**changes: Any) -> bytes:
    body = json.loads(fixture("publisher-session-started.json"))
    return compact({**body, **changes})


async def test_started_fixture_accepts_only_its_bounded_fields(
    contract: Publisher, relay: DevRelay
) -> None:
    """sharedContracts `accepts only the bounded session-started fields for the publisher's
    own profile`."""
    path = session_path(CONTRACT, "prf_default", "contract-session", "started")
    response = await contract.send("PUT", path, fixture("publisher-session-started.json"))
    assert (response.status_code, response.json()) == (200, {"status": "accepted"})
    [event] = relay.started_events
    assert (event.event_id, event.started_at) == ("started:contract-session", NOW_MS)

    for bad in (
        started_variant(title="extra"),
        started_variant(version=2),
        started_variant(sessionId="other-session"),
        started_variant(eventId="e" * 201),
        started_variant(startedAt=1.5),
    ):
        response = await contract.send("PUT", path, bad)
        assert response.status_code == 400, bad
        assert response.json() == {"error": "invalid_session_started"}

    mismatch = await contract.send("PUT", path, started_variant(profileId="prf_other"))
    assert (mismatch.status_code, mismatch.json()) == (403, {"error": "profile_mismatch"})

    other = session_path(CONTRACT, "prf_other", "contract-session", "started")
    response = await contract.send("PUT", other, started_variant(profileId="prf_other"))
    assert (response.status_code, response.json()) == (409, {"status": "unauthorized"})
    assert len(relay.started_events) == 1


# ── pairing (convex.test.ts) ─────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("raw", "origin"),
    [
        ("https://Hermes.Example:443", "https://hermes.example"),
        ("HTTP://Example.COM:80/", "http://example.com"),
        (" https://example.com:08443/ ", "https://example.com:8443"),
        ("https:\\\\example.com", "https://example.com"),
        ("https://[0:0::1]:443", "https://[::1]"),
        ("http://0x7f.1", "http://127.0.0.1"),
        ("https://bücher.example", "https://xn--bcher-kva.example"),
        ("https://example.com?", "https://example.com"),
        ("https://user:pw@example.com", None),
        ("https://example.com/path", None),
        ("https://example.com?x=1", None),
        ("https://example.com#top", None),
        ("https://example.com:65536", None),
        ("ftp://example.com", None),
        ("https://", None),
    ],
)
def test_origins_canonicalise_like_url_origin(raw: str, origin: str | None) -> None:
    """Publisher ids are canonicalised the way `new URL(x).origin` does, or refused."""
    assert canonical_origin(raw) == origin


async def test_registration_canonicalises_the_origin_and_a_refused_one_keeps_the_invitation(
    client: httpx.AsyncClient, relay: DevRelay
) -> None:
    """convex.test `canonicalizes publisher origins`; a refused one leaves the invitation usable."""
    fields = {"profileId": "profile-1", "label": "Home", "publicKey": b64url(bytes(32))}
    response = await redeem(
        client, invitation=relay.mint_invitation(), publisherId="https://Hermes.Example:443",
        **fields,
    )  # fmt: skip
    assert response.status_code == 201
    assert response.json()["publisherId"] == "https://hermes.example"

    invitation = relay.mint_invitation()
    refused = await redeem(
        client, invitation=invitation, publisherId="https://hermes.example/path", **fields
    )
    assert (refused.status_code, refused.json()) == (400, {"error": "invalid_pairing"})
    retried = await redeem(
        client, invitation=invitation, publisherId="https://hermes.example", **fields
    )
    assert retried.status_code == 201


async def test_publisher_redeem_validates_its_body(
    client: httpx.AsyncClient, relay: DevRelay
) -> None:
    """Bad JSON, missing or overlong fields and a key that is not 32 bytes are each refused."""
    good = {
        "invitation": relay.mint_invitation(),
        "publisherId": PUB,
        "profileId": "prf_a",
        "label": "Home",
        "publicKey": b64url(bytes(32)),
    }
    cases = [
        (b"[]", "invalid_json"),
        (b"{", "invalid_json"),
        (compact(good)[:-1] + b" " * (512 * 1024) + b"}", "invalid_json"),
        (compact({**good, "label": " "}), "invalid_pairing"),
        (compact({**good, "label": "x" * 81}), "invalid_pairing"),
        (compact({k: v for k, v in good.items() if k != "profileId"}), "invalid_pairing"),
        (compact({**good, "publicKey": b64url(bytes(31))}), "invalid_public_key"),
        (compact({**good, "publicKey": "not base64!"}), "invalid_public_key"),
        (compact({**good, "invitation": "unknown"}), "invalid_invitation"),
    ]
    for body, error in cases:
        response = await client.post(
            "/v1/pairings/publisher/redeem", content=body, headers=JSON_TYPE
        )
        assert (response.status_code, response.json()) == (400, {"error": error}), body[:40]
    assert (await redeem(client, **good)).status_code == 201


async def test_invitations_are_one_time_and_expire_after_ten_minutes(
    client: httpx.AsyncClient, relay: DevRelay, clock: Clock
) -> None:
    """convex.test `consumes publisher invitations exactly once`; ten minutes later one expires."""
    fields = {"publisherId": PUB, "profileId": "prf_a", "label": "Home"}
    invitation = relay.mint_invitation()
    first = await redeem(client, invitation=invitation, publicKey=b64url(bytes(32)), **fields)
    assert first.status_code == 201
    again = await redeem(client, invitation=invitation, publicKey=b64url(bytes(32)), **fields)
    assert (again.status_code, again.json()) == (400, {"error": "expired_invitation"})

    late = relay.mint_invitation()
    clock.now += 600
    expired = await redeem(client, invitation=late, publicKey=b64url(bytes(32)), **fields)
    assert (expired.status_code, expired.json()) == (400, {"error": "expired_invitation"})


async def test_replacement_key_activates_on_first_signed_publication(
    client: httpx.AsyncClient, relay: DevRelay, clock: Clock, pub: Publisher
) -> None:
    """convex.test: a replacement key activates on first signed publication, revoking the old."""
    assert (await pub.snapshot(state("s1", 1))).status_code == 200
    replacement = await register(client, relay, clock, profile_id="prf_requested")
    keys = {key.key_id: key for key in relay.keys(PUB)}
    assert keys[pub.key_id].activated_at == NOW_MS
    assert keys[replacement.key_id].activated_at is None

    # Until the new key publishes, the old one still works: a failed re-pairing loses nothing.
    assert (await pub.snapshot(state("s1", 2))).status_code == 200
    clock.now += 1
    assert (await replacement.snapshot(state("s1", 3))).status_code == 200
    keys = {key.key_id: key for key in relay.keys(PUB)}
    assert keys[pub.key_id].revoked_at == NOW_MS + 1000
    assert keys[replacement.key_id].activated_at == NOW_MS + 1000
    assert (await pub.snapshot(state("s1", 4))).status_code == 401
    admin = {key["keyId"]: key for key in relay.state()["keys"]}
    assert admin[pub.key_id] | {"activated": True, "revoked": True} == admin[pub.key_id]
    assert "publicKey" not in admin[pub.key_id]


async def test_owner_recovery_preserves_the_owner_grant_scope(
    client: httpx.AsyncClient, relay: DevRelay, clock: Clock, pub: Publisher
) -> None:
    """convex.test `profileIdPreserved` on owner recovery: the old scope and its rows are kept."""
    assert (await pub.snapshot(state("s1", 1))).status_code == 200
    invitation = relay.mint_invitation("usr_a")
    key = Ed25519PrivateKey.generate()
    response = await redeem(
        client, invitation=invitation, publisherId=PUB, profileId="prf_new", label="Home",
        publicKey=raw_public(key),
    )  # fmt: skip
    data = response.json()
    assert response.status_code == 201
    assert (data["profileId"], data["profileIdPreserved"]) == ("prf_a", True)
    assert (data["ok"], data["protocolVersion"], data["userId"]) == (True, 2, "usr_a")
    assert [row.session_id for row in relay.rows(PUB, "prf_a")] == ["s1"]


async def test_another_user_cannot_take_a_registered_origin(
    client: httpx.AsyncClient, relay: DevRelay, pub: Publisher
) -> None:
    """Another relay user's registration of an owned origin is refused and spends no invitation."""
    invitation = relay.mint_invitation("usr_b")
    fields = {"profileId": "prf_b", "label": "Mine", "publicKey": b64url(bytes(32))}
    response = await redeem(client, invitation=invitation, publisherId=PUB, **fields)
    assert (response.status_code, response.json()) == (
        400,
        {"error": "publisher_already_registered"},
    )
    elsewhere = await redeem(
        client, invitation=invitation, publisherId="https://b.example", **fields
    )
    assert elsewhere.status_code == 201


async def test_profile_enrollment_requires_the_publisher_signature(
    relay: DevRelay, pub: Publisher
) -> None:
    """convex.test `requires the registered publisher signature for profile enrollment`."""
    invitation = relay.mint_invitation("usr_b")
    body = compact({"invitation": invitation, "publisherId": PUB, "profileId": "prf_b"})
    unsigned = await pub.client.post("/v1/pairings/profile/redeem", content=body, headers=JSON_TYPE)
    assert (unsigned.status_code, unsigned.json()) == (401, {"error": "unauthorized"})
    forged = await pub.enroll(invitation, "prf_b", sign_path="/v1/pairings/publisher/redeem")
    assert forged.status_code == 401

    response = await pub.enroll(invitation, "prf_b")
    assert (response.status_code, response.json()) == (
        201,
        {"ok": True, "protocolVersion": 2, "userId": "usr_b", "publisherId": PUB,
         "profileId": "prf_b"},
    )  # fmt: skip
    again = await pub.enroll(invitation, "prf_b")
    assert (again.status_code, again.json()) == (400, {"error": "expired_invitation"})


async def test_profile_redeem_validates_before_and_after_the_signature(
    relay: DevRelay, pub: Publisher
) -> None:
    """413 oversize, 400 invalid_json and invalid_pairing come first; invitation errors after."""
    path = "/v1/pairings/profile/redeem"
    assert (await pub.send("POST", path, b" " * (512 * 1024 + 1))).status_code == 413
    assert (await pub.send("POST", path, b"[1]")).json() == {"error": "invalid_json"}
    no_profile = compact({"invitation": "x", "publisherId": PUB})
    assert (await pub.send("POST", path, no_profile)).json() == {"error": "invalid_pairing"}
    unknown = await pub.enroll("unknown", "prf_b")
    assert (unknown.status_code, unknown.json()) == (400, {"error": "invalid_invitation"})


async def test_profiles_are_isolated_and_re_enrollment_replaces_the_grant(
    relay: DevRelay, pub: Publisher
) -> None:
    """convex.test `keeps one server publisher while isolating enrolled profile state`."""
    assert (await pub.enroll(relay.mint_invitation("usr_b"), "prf_b")).status_code == 201
    assert (await pub.snapshot(state("session-a", 1))).status_code == 200
    assert (await pub.snapshot(state("session-b", 1), profile_id="prf_b")).status_code == 200
    assert [(r.user_id, r.session_id) for r in relay.rows(PUB, "prf_a")] == [("usr_a", "session-a")]
    assert [(r.user_id, r.session_id) for r in relay.rows(PUB, "prf_b")] == [("usr_b", "session-b")]
    admin = relay.state()
    assert [len(admin[name]) for name in ("publishers", "keys", "grants")] == [1, 1, 2]

    # One grant per relay user and publisher: a new scope replaces the old one and its rows.
    assert (await pub.enroll(relay.mint_invitation("usr_b"), "prf_c")).status_code == 201
    assert relay.rows(PUB, "prf_b") == []
    refused = await pub.snapshot(state("session-b", 2), profile_id="prf_b")
    assert (refused.status_code, refused.json()) == (409, {"status": "unauthorized"})


# ── snapshots ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("value", ['"no"', "null", "0"])
async def test_alert_eligible_must_be_a_boolean(pub: Publisher, value: str) -> None:
    """convex.test: `alertEligible: "no"` or `null` gives 400; omitted or false is accepted."""
    path = snapshot_path(PUB, "prf_a")
    good = compact({"snapshotId": "s", "states": [state("s1", 1, alertEligible=False)]})
    bad = good.replace(b'"alertEligible":false', b'"alertEligible":' + value.encode())
    response = await pub.send("PUT", path, bad)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_snapshot"})
    assert (await pub.send("PUT", path, good)).status_code == 200
    assert (await pub.snapshot(state("s2", 1))).status_code == 200


@pytest.mark.parametrize(
    "bad",
    [
        {"title": "   "},
        {"title": "𝄞" * 61},  # 122 UTF-16 code units
        {"phase": "paused"},
        {"deepLink": "//evil.example"},
        {"deepLink": "sessions/s1"},
        {"revision": -1},
        {"revision": 1.5},
        {"revision": 2**53},
        {"updatedAt": "now"},
        {"sessionId": "x" * 192},
        {"streamId": ""},
        {"eventId": None},
    ],
)
async def test_states_are_validated_as_the_relay_does(pub: Publisher, bad: dict[str, Any]) -> None:
    """Each state field outside the relay's limits (§4.2) makes the whole snapshot 400."""
    response = await pub.snapshot(state("s1", 1) | bad)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_snapshot"})
    assert (await pub.snapshot(state("s1", 1, title="𝄞" * 60))).status_code == 200


async def test_snapshot_envelope_limits(pub: Publisher, relay: DevRelay) -> None:
    """snapshotId 1..191 after trim and at most 500 states; duplicate sessionIds give 500."""
    path = snapshot_path(PUB, "prf_a")
    for body in (
        {"snapshotId": " ", "states": []},
        {"snapshotId": "s" * 192, "states": []},
        {"snapshotId": "s", "states": {}},
        {"snapshotId": "s", "states": [state(f"s{i}", 1) for i in range(501)]},
    ):
        assert (await pub.send("PUT", path, compact(body))).status_code == 400
    many = [state(f"s{i}", 1) for i in range(500)]
    assert (await pub.snapshot(*many)).status_code == 200

    duplicate = await pub.snapshot(state("d", 5), state("d", 6), nonce="dup")
    assert duplicate.status_code == 500
    assert all(row.session_id != "d" for row in relay.rows(PUB, "prf_a"))
    assert (await pub.snapshot(state("d", 5), nonce="dup")).status_code == 200


async def test_revisions_lower_ignored_equal_refreshes_higher_replaces(
    pub: Publisher, relay: DevRelay, clock: Clock
) -> None:
    """convex.test: an equal-revision heartbeat extends the lease to receivedAt + 3 min (§4.3)."""
    assert (await pub.snapshot(state("s1", 10, title="First"), state("s2", 10))).status_code == 200
    clock.now += 60
    assert (await pub.snapshot(state("s1", 10, title="Ignored"))).status_code == 200
    [row] = [r for r in relay.rows(PUB, "prf_a") if r.session_id == "s1"]
    assert (row.title, row.received_at) == ("First", NOW_MS + 60_000)
    assert row.expires_at == NOW_MS + 60_000 + 3 * 60_000

    assert (await pub.snapshot(state("s1", 9, title="Older"))).status_code == 200
    assert relay.rows(PUB, "prf_a")[0].title == "First"
    assert (await pub.snapshot(state("s1", 11, "completed", title="Newer"))).status_code == 200
    row = next(r for r in relay.rows(PUB, "prf_a") if r.session_id == "s1")
    assert (row.title, row.phase, row.revision) == ("Newer", "completed", 11)
    assert row.expires_at == row.terminal_expires_at == NOW_MS + 60_000 + 15 * 60_000

    # s2 was missing from the last snapshots: not tombstoned, it lapses with its lease.
    clock.now = NOW + 3 * 60 - 0.001
    assert {r.session_id for r in relay.rows(PUB, "prf_a")} == {"s1", "s2"}
    clock.now = NOW + 3 * 60
    assert {r.session_id for r in relay.rows(PUB, "prf_a")} == {"s1"}
    assert len(relay.rows(PUB, "prf_a", include_expired=True)) == 2


async def test_alert_ineligibility_is_inherited_within_the_same_phase(
    pub: Publisher, relay: DevRelay
) -> None:
    """alertEligibility.test: `false` sticks to the same run and phase until the phase changes."""
    await pub.snapshot(state("s1", 1, streamId="r1", alertEligible=False))
    await pub.snapshot(state("s1", 2, streamId="r1"))
    assert relay.rows(PUB, "prf_a")[0].alert_eligible is False
    await pub.snapshot(state("s1", 3, "completed", streamId="r1"))
    assert relay.rows(PUB, "prf_a")[0].alert_eligible is None


async def test_nonce_replay_is_refused_and_changes_nothing(
    pub: Publisher, relay: DevRelay, clock: Clock
) -> None:
    """A nonce reused within 10 minutes gives 409 `replay`; after the window it is accepted."""
    assert (await pub.snapshot(state("s1", 1), nonce="once")).status_code == 200
    replay = await pub.snapshot(state("s1", 2), nonce="once")
    assert (replay.status_code, replay.json()) == (409, {"status": "replay"})
    assert relay.rows(PUB, "prf_a")[0].revision == 1
    clock.now += 10 * 60 + 1
    assert (await pub.snapshot(state("s1", 3), nonce="once")).status_code == 200


async def test_checks_run_in_the_relay_order(pub: Publisher) -> None:
    """§1.2: origin 404, then 413, then 401 before JSON parsing, then 400, then shape 404."""
    huge = b" " * (512 * 1024 + 1)
    bad_origin = "/v1/publishers/not-an-origin/profiles/prf_a/snapshot"
    assert (await pub.client.put(bad_origin, content=huge)).status_code == 404
    path = snapshot_path(PUB, "prf_a")
    too_large = await pub.client.put(path, content=huge)
    assert (too_large.status_code, too_large.json()) == (413, {"error": "body_too_large"})
    assert (await pub.client.put(path, content=b"not json")).status_code == 401
    assert (await pub.send("PUT", path, b"not json")).json() == {"error": "invalid_json"}
    for shape in (
        f"/v1/publishers/{PUB.replace(':', '%3A').replace('/', '%2F')}/profiles/prf_a/other",
        session_path(PUB, "prf_a", "s1", "activity"),
        snapshot_path(PUB, "prf_a").replace("/profiles/", "/nope/"),
    ):
        response = await pub.send("PUT", shape, b"{}")
        assert (response.status_code, response.json()) == (404, {"error": "not_found"}), shape


async def test_body_limit_counts_characters_not_bytes(pub: Publisher) -> None:
    """512 Ki characters pass even when their UTF-8 is larger; one more gives 413."""
    path = snapshot_path(PUB, "prf_a")
    head = b'{"snapshotId":"s","states":[],"pad":"'
    fill = 512 * 1024 - len(head) - 2
    body = head + "é".encode() * fill + b'"}'
    assert len(body) > 512 * 1024
    assert (await pub.send("PUT", path, body)).status_code == 200
    over = head + "é".encode() * (fill + 1) + b'"}'
    assert (await pub.send("PUT", path, over)).status_code == 413


# ── viewed ───────────────────────────────────────────────────────────────────


async def test_viewed_acknowledges_terminal_rows_up_to_through(
    pub: Publisher, relay: DevRelay
) -> None:
    """Only pending completions of that session with updatedAt <= through are acknowledged."""
    done = NOW_MS - 5_000
    await pub.snapshot(
        state("s1", 1, "completed", streamId="r1", updatedAt=done),
        state("s2", 1, "running", updatedAt=done),
    )
    assert (await pub.viewed("s1", done - 1)).json() == {"status": "accepted", "acknowledged": 0}
    assert (await pub.viewed("s2", NOW_MS)).json() == {"status": "accepted", "acknowledged": 0}
    assert (await pub.viewed("s1", done)).json() == {"status": "accepted", "acknowledged": 1}
    assert (await pub.viewed("s1", NOW_MS)).json()["acknowledged"] == 0
    rows = {row.session_id: row for row in relay.rows(PUB, "prf_a")}
    assert (rows["s1"].acknowledged, rows["s2"].acknowledged) == (True, None)
    assert [(v.session_id, v.through, v.acknowledged) for v in relay.viewed][2] == ("s1", done, 1)

    # A finished run stays pending after a new run replaces its row, until it is viewed.
    await pub.snapshot(state("s3", 1, "failed", streamId="a", updatedAt=done))
    await pub.snapshot(state("s3", 2, "running", streamId="b", updatedAt=NOW_MS))
    assert (await pub.viewed("s3", done)).json()["acknowledged"] == 1
    invalid = await pub.viewed("s3", 1.5)  # type: ignore[arg-type]
    assert (invalid.status_code, invalid.json()) == (400, {"error": "invalid_viewed"})


# ── fault injection, older relays, concurrency ───────────────────────────────


async def test_injected_faults_answer_their_status_and_change_nothing(
    client: httpx.AsyncClient, relay: DevRelay, pub: Publisher
) -> None:
    """`inject` answers a route's next requests with a status, spending no nonce or invitation."""
    relay.inject("snapshot", 503, times=2)
    for _ in range(2):
        response = await pub.snapshot(state("s1", 1), nonce="kept")
        assert response.status_code == 503
    assert relay.rows(PUB, "prf_a") == []
    assert (await pub.snapshot(state("s1", 1), nonce="kept")).status_code == 200
    assert [r.status for r in relay.requests if r.route == "snapshot"] == [503, 503, 200]

    relay.inject("publisher_redeem", 500)
    invitation = relay.mint_invitation("usr_z")
    fields = {"profileId": "p", "label": "l", "publicKey": b64url(bytes(32))}
    failed = await redeem(client, invitation=invitation, publisherId="https://z.example", **fields)
    assert failed.status_code == 500
    ok = await redeem(client, invitation=invitation, publisherId="https://z.example", **fields)
    assert ok.status_code == 201

    with pytest.raises(InvalidInputError):
        relay.inject("activity", 500)
    with pytest.raises(InvalidInputError):
        relay.inject("viewed", 700)


async def test_unsupported_routes_answer_404_like_an_older_relay(
    relay: DevRelay, pub: Publisher
) -> None:
    """A route in `unsupported` gives 404 after authentication, as a relay without it does."""
    relay.unsupported |= {"viewed", "started", "profile_redeem"}
    assert (await pub.viewed("s1", NOW_MS)).status_code == 404
    started = session_path(PUB, "prf_a", "s1", "started")
    assert (await pub.send("PUT", started, b"{}")).status_code == 404
    assert (await pub.client.put(started, content=b"{}")).status_code == 401
    assert (await pub.enroll(relay.mint_invitation("usr_b"), "prf_b")).status_code == 404
    assert (await pub.snapshot(state("s1", 1))).status_code == 200


async def test_concurrent_requests_each_apply_whole(pub: Publisher, relay: DevRelay) -> None:
    """Concurrent signed snapshots are all accepted and the highest revision wins."""
    responses = await asyncio.gather(*(pub.snapshot(state("s1", r)) for r in range(1, 41)))
    assert {response.status_code for response in responses} == {200}
    assert relay.rows(PUB, "prf_a")[0].revision == 40


async def test_random_bytes_make_tokens_deterministic(clock: Clock) -> None:
    """Invitations are 32 random bytes and key ids `key_` + 8 random bytes, base64url."""
    counter = iter(range(1, 100))
    relay = DevRelay(clock=clock, random_bytes=lambda n: bytes([next(counter)]) * n)
    assert relay.mint_invitation() == b64url(b"\x01" * 32)
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        response = await redeem(
            client, invitation=b64url(b"\x01" * 32), publisherId=PUB, profileId="p", label="l",
            publicKey=b64url(bytes(32)),
        )  # fmt: skip
        assert response.json()["keyId"] == "key_" + b64url(b"\x02" * 8)
        admin = await client.post("/admin/invitations", json={"userId": "usr_q"})
        assert admin.status_code == 201
        assert admin.json() == {"invitation": b64url(b"\x03" * 32), "expiresAt": NOW_MS + 600_000}
        refused = await client.post("/admin/invitations", json={"userId": ""})
        assert refused.status_code == 400


# ── over real HTTP ───────────────────────────────────────────────────────────


async def test_loopback_server_answers_over_real_http(clock: Clock) -> None:
    """`serve` runs the relay on an ephemeral loopback port; a signed snapshot verifies over TCP."""
    relay = DevRelay(clock=clock)
    async with serve(relay) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        assert base_url.startswith("http://127.0.0.1:")
        invitation = (await client.post("/admin/invitations")).json()["invitation"]
        key = Ed25519PrivateKey.generate()
        registered = await redeem(
            client, invitation=invitation, publisherId=PUB, profileId="prf_a", label="Home",
            publicKey=raw_public(key),
        )  # fmt: skip
        pub = Publisher(client, clock, key, registered.json()["keyId"], PUB, "prf_a")
        assert (await pub.snapshot(state("s1", 1))).status_code == 200
        admin = (await client.get("/admin/state")).json()
        assert admin["grants"][0]["rows"][0]["sessionId"] == "s1"
    assert relay.requests[-2].path == snapshot_path(PUB, "prf_a")


async def test_a_delayed_fault_times_the_client_out_and_the_server_still_stops(
    relay: DevRelay, pub: Publisher
) -> None:
    """`inject(..., delay=)` holds the answer past a client timeout; shutdown is not blocked."""
    relay.inject("viewed", 503, delay=0.5)
    async with serve(relay) as base_url, httpx.AsyncClient(base_url=base_url, timeout=0.1) as c:
        path = session_path(PUB, "prf_a", "s1", "viewed")
        body = compact({"through": NOW_MS})
        with pytest.raises(httpx.ReadTimeout):
            await c.put(path, content=body, headers=pub.headers("PUT", path, body))
    assert relay.requests[-1].status == 503
    assert relay.viewed == []


async def test_serve_refuses_non_loopback_addresses() -> None:
    """The admin endpoints are unauthenticated, so only loopback hosts are served."""
    with pytest.raises(InvalidInputError):
        async with serve(DevRelay(), host="0.0.0.0"):  # noqa: S104 - the refused case
            pass


def test_public_names_are_exported() -> None:
    """Every name in `relay_testing.__all__` resolves; the dev relay's records and the constants
    docs/pairing.md names are in it."""
    for name in relay_testing.__all__:
        assert getattr(relay_testing, name) is not None
    records = {"DevRelay", "RecordedRequest", "SessionRow", "StartedEvent", "ViewedAck"}
    assert records | {"serve", "run"} <= set(relay_testing.__all__)
    assert relay_testing.INVITATION_TTL_MS == 10 * 60_000  # "after ten minutes"
    assert relay_testing.DEFAULT_USER == "usr_dev"


# ── bounded memory ───────────────────────────────────────────────────────────


async def test_the_dev_relay_keeps_only_its_last_requests(clock: Clock) -> None:
    """Past `keep_requests` the oldest requests go: a dev relay left running stays one size,
    and still counts every request and keeps the newest in order."""
    relay = DevRelay(clock=clock, keep_requests=10)
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        for n in range(25):
            await client.post(f"/v1/nowhere/{n}", content=b"x" * 1000)
    assert relay.requests_seen == 25
    assert [r.path for r in relay.requests] == [f"/v1/nowhere/{n}" for n in range(15, 25)]
    assert DevRelay().keep_requests == 1_000
    with pytest.raises(InvalidInputError):
        DevRelay(keep_requests=0)
    everything = DevRelay(clock=clock, keep_requests=None)
    transport = httpx.ASGITransport(app=everything)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        for n in range(25):
            await client.get(f"/v1/nowhere/{n}")
    assert len(everything.requests) == everything.requests_seen == 25
