"""Acceptance tests mirroring upstream `web/packages/server/src/sessions/relay.test.ts` (spec §6.1).

Each upstream test has one counterpart here, named after it, that drives the real `RelayService`
and `RelayPublisher` against the in-process dev relay on the memory store (the contract suite
proves the real backends keep the same rules). The assertions look at what the relay received and
kept, at what the store holds, and at the service's answers and log lines. Where upstream inspects
a file, the store API is checked, and the test runs again on the JSON backend to check the file.
Where the port differs from upstream on purpose, the docstring says so. No test sleeps: time moves
only when `env.clock` is advanced.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import stat
from collections.abc import Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env

from relay.errors import InvalidInputError, RelayHttpError, RelayPairingError, SessionNotFoundError
from relay.host import ActiveRun
from relay.pairing import DIFFERENT_RELAY
from relay.protocol import canonical_string, validated_origin
from relay.service import RelayService
from relay.store import DeletedScope, ProfileGrant, RelayStore
from relay.testing import RecordedRequest

pytestmark = on(MEMORY)
# Tests that also look at the JSON backend's files, which only it has.
WITH_FILES = on(MEMORY, "json")

Json = dict[str, Any]

# The publisher id as one path segment, encoded by hand rather than by the code under test.
PUB_SEGMENT = "https%3A%2F%2Fhermes.example"
PROFILE_REDEEM = "/v1/pairings/profile/redeem"
CONFIG_FILE_KEYS = ["key_id", "private_key_path", "profiles", "publisher_id", "url", "version"]
OWNER_REQUIRED = (
    "An owner must register this Hermes server with Talaria Relay before profile enrollment"
)
LEASE_ON = {"ok": True, "lease_seconds": 90}
LEASE_OFF = {"ok": True, "lease_seconds": 0}


# ── helpers ──────────────────────────────────────────────────────────────────


def relay_path(profile_id: str, *rest: str) -> str:
    """`/v1/publishers/{pub}/profiles/{prf}/...` as the relay must receive it."""
    assert quote(PUBLISHER_ID, safe="") == PUB_SEGMENT
    return "/".join(["/v1/publishers", PUB_SEGMENT, "profiles", profile_id, *rest])


def viewed_path(profile_id: str, session_id: str) -> str:
    return relay_path(profile_id, "sessions", quote(session_id, safe=""), "viewed")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def json_dir(store: RelayStore) -> Path | None:
    """The state directory of a JSON store; None for the SQL backends."""
    url = store.display_url
    return Path(url.removeprefix("json://")) if url.startswith("json://") else None


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def file_text(path: Path) -> str:
    return path.read_text()


def assert_signed(env: Env, request: RecordedRequest, path: str, key_id: str) -> None:
    """The request went to `path` and its signature verifies with the registered public key."""
    assert request.path == path
    headers = request.headers
    assert headers["x-talaria-key-id"] == key_id
    assert headers["x-talaria-timestamp"] == str(int(env.clock.now))
    assert re.fullmatch(r"[0-9a-f]{32}", headers["x-talaria-nonce"])
    message = canonical_string(
        request.method,
        request.path,
        headers["x-talaria-timestamp"],
        headers["x-talaria-nonce"],
        request.body,
    )
    # Raises InvalidSignature when the signature does not cover exactly what was received.
    env.relay.public_key(key_id).verify(unb64url(headers["x-talaria-signature"]), message)


async def pairing_error(awaitable: Awaitable[Any]) -> RelayPairingError:
    with pytest.raises(RelayPairingError) as caught:
        await awaitable
    return caught.value


async def register(env: Env) -> str:
    """Register the server with the `default` profile; that profile's relay scope."""
    assert await env.pair() == {"ok": True, "publisher_id": PUBLISHER_ID}
    return (await env.config()).profiles["default"].profile_id


async def enroll_work(env: Env) -> str:
    """Enroll the `work` profile (another relay user, since the relay keeps one grant per user)."""
    assert await env.pair("work", user="usr_work") == {"ok": True, "publisher_id": PUBLISHER_ID}
    return (await env.config()).profiles["work"].profile_id


async def finish(env: Env, stream_id: str, phase: str = "completed") -> None:
    """A turn ends: the service hears of it while the run still exists, then the run goes."""
    await env.service.note_terminal(stream_id, phase)
    env.host.end_run(stream_id)


def states_of(request: RecordedRequest) -> list[Json]:
    states: list[Json] = request.json()["states"]
    return states


def last_states(env: Env) -> list[Json]:
    return states_of(env.sent("snapshot")[-1])


def since(env: Env, mark: int, *routes: str) -> list[RecordedRequest]:
    """Requests received after the first `mark` ones, of the given routes, in arrival order."""
    return [r for r in env.relay.requests[mark:] if r.route in routes]


async def presence(
    env: Env, tab_id: str, active: bool, seq: int, profile: str = "default"
) -> dict[str, Any]:
    body = {"tab_id": tab_id, "active": active, "seq": seq}
    return await env.service.update_presence(body, profile)


# ── relay.test.ts: 'Talaria relay pairing and publishing' ────────────────────


@WITH_FILES
async def test_rejects_untrusted_relays_and_malformed_fields_before_touching_the_network(
    store: RelayStore,
) -> None:
    """Mirrors `rejects untrusted relays and malformed fields before touching the network`.

    Every invalid pairing request fails with the §3.2 message and status, in the table's order, and
    neither the relay nor the store sees anything.
    """
    cases: list[tuple[str, dict[str, Any], str, int]] = [
        # upstream's three
        ("default", {"relay_url": "https://evil.example"}, "Untrusted Talaria Relay origin", 400),
        (
            "default",
            {"publisher_id": "https://hermes.example/path"},
            "value must be an HTTP(S) origin",
            400,
        ),
        ("default", {"publisher_invitation": ""}, "Invalid relay pairing fields", 400),
        # the rest of the §3.2 table
        ("default", {"relay_url": None}, "Missing relay pairing fields", 400),
        ("default", {"label": 7}, "Missing relay pairing fields", 400),
        (
            "default",
            {"relay_url": "http://relay.example"},
            "value must be an HTTPS origin; http:// is accepted only for a loopback relay, with "
            "allow_insecure_loopback=True (the command line's --allow-insecure-loopback)",
            400,
        ),
        (
            "default",
            {"publisher_id": "https://u:p@hermes.example"},
            "value must be an HTTP(S) origin",
            400,
        ),
        (
            "default",
            {"publisher_id": "https://hermes.example?x"},
            "value must be an HTTP(S) origin",
            400,
        ),
        ("default", {"publisher_invitation": "i" * 257}, "Invalid relay pairing fields", 400),
        ("default", {"label": "l" * 81}, "Invalid relay pairing fields", 400),
        # the origin is checked before the field lengths
        (
            "default",
            {"relay_url": "https://evil.example", "publisher_invitation": ""},
            "Untrusted Talaria Relay origin",
            400,
        ),
        ("ghost", {}, "Hermes profile is unavailable", 403),
        ("   ", {}, "Hermes profile is unavailable", 403),
    ]
    async with relay_env(store) as env:
        error = await pairing_error(
            env.service.pair(["not", "an", "object"], "default", operator=True)
        )
        assert (str(error), error.status) == ("Invalid pairing request", 400)
        for profile, body, message, status in cases:
            error = await pairing_error(env.pair(profile, **body))
            assert (str(error), error.status) == (message, status), (profile, body)

        assert env.relay.requests == []
        assert await store.load_config() is None
        assert env.service.current() is None
        if (state := json_dir(store)) is not None:
            assert not (state / "talaria-relay.json").exists()


@WITH_FILES
async def test_registers_the_publisher_persists_the_key_at_0600_and_publishes_a_signed_initial_snapshot(  # noqa: E501
    store: RelayStore,
) -> None:
    """Mirrors `registers the publisher, persists the key at 0600, and publishes a signed initial
    snapshot`.

    Registration sends an unsigned redeem with a fresh `prf_` scope and the new public key, stores
    the private key and a sorted v2 registration, then publishes an empty snapshot signed with that
    key; on the JSON backend the key file is 0600 and the config file's keys are sorted.
    """
    async with relay_env(store) as env:
        invitation = env.relay.mint_invitation("usr_owner")
        answer = await env.pair(
            relay_url=RELAY_URL + "/", publisher_invitation=invitation, label="Test box"
        )
        assert answer == {"ok": True, "publisher_id": PUBLISHER_ID}
        assert [r.route for r in env.relay.requests] == ["publisher_redeem", "snapshot"]
        assert [r.status for r in env.relay.requests] == [201, 200]

        redeem = env.relay.requests[0]
        assert redeem.path == "/v1/pairings/publisher/redeem"
        assert "x-talaria-signature" not in redeem.headers
        body = redeem.json()
        assert set(body) == {"invitation", "publisherId", "profileId", "label", "publicKey"}
        assert (body["invitation"], body["publisherId"], body["label"]) == (
            invitation,
            PUBLISHER_ID,
            "Test box",
        )
        assert re.fullmatch(r"prf_[0-9a-f]{32}", body["profileId"])
        (key_info,) = env.relay.keys(PUBLISHER_ID)
        assert key_info.public_key == body["publicKey"]

        config = await env.config()
        assert (config.url, config.publisher_id, config.key_id) == (
            RELAY_URL,
            PUBLISHER_ID,
            key_info.key_id,
        )
        identity = await store.profile_identity("default")
        assert re.fullmatch(r"pfi_[0-9a-f]{32}", identity)
        assert dict(config.profiles) == {"default": ProfileGrant(identity, body["profileId"])}

        # The stored key is the PKCS#8 PEM of the registered public key.
        pem = await store.load_key(config.key_ref)
        assert "BEGIN PRIVATE KEY" in pem
        key = load_pem_private_key(pem.encode(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        raw_public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        assert base64.urlsafe_b64encode(raw_public).rstrip(b"=").decode() == body["publicKey"]

        if (state := json_dir(store)) is not None:
            key_file = Path(config.key_ref)
            digest = hashlib.sha256(config.key_id.encode()).hexdigest()[:16]
            assert key_file == state / f"talaria-relay-publisher-{digest}.pem"
            assert file_mode(key_file) == 0o600
            assert file_text(key_file) == pem
            saved = json.loads((state / "talaria-relay.json").read_text())
            assert list(saved) == CONFIG_FILE_KEYS
            assert saved["private_key_path"] == config.key_ref

        snapshot = env.relay.requests[1]
        assert_signed(env, snapshot, relay_path(body["profileId"], "snapshot"), config.key_id)
        assert (
            snapshot.path == f"/v1/publishers/{PUB_SEGMENT}/profiles/{body['profileId']}/snapshot"
        )
        assert re.fullmatch(r"webui:[0-9a-f]{32}", snapshot.json()["snapshotId"])
        assert snapshot.json()["states"] == []
        # The relay activated the key on its first signed publication.
        assert env.relay.keys(PUBLISHER_ID)[0].activated_at is not None
        assert env.service.current() is not None


async def test_re_pairing_to_a_different_relay_or_publisher_answers_409(store: RelayStore) -> None:
    """Mirrors `re-pairing to a different relay or publisher answers 409`.

    Once registered, a pairing naming another publisher id (compared as typed, so a case change
    counts) or another relay gets 409 without a request, and the registration stays as it was.
    """
    async with relay_env(store) as env:
        await register(env)
        before = await env.config()
        mark = len(env.relay.requests)
        for publisher_id in ("https://other.example", "https://HERMES.example"):
            error = await pairing_error(env.pair(publisher_id=publisher_id))
            assert (str(error), error.status) == (
                DIFFERENT_RELAY,
                409,
            )
        # A server configured to trust another relay meets the registration to this one.
        other_relay = RelayService(
            store, env.host, relay_url="https://relay2.example", http=env.http, clock=env.clock
        )
        assert not await other_relay.start()  # a registration with another relay: no publisher
        error = await pairing_error(
            other_relay.pair(
                {
                    "relay_url": "https://relay2.example",
                    "publisher_id": PUBLISHER_ID,
                    "publisher_invitation": "invite",
                },
                "default",
                operator=True,
            )
        )
        assert (str(error), error.status) == (
            DIFFERENT_RELAY,
            409,
        )
        await other_relay.stop()
        assert env.relay.requests[mark:] == []
        assert await env.config() == before


@WITH_FILES
async def test_publishes_active_runs_pending_prompts_and_terminal_phases_for_the_enrolled_profile(
    store: RelayStore,
) -> None:
    """Mirrors `publishes active runs, pending prompts, and terminal phases for the enrolled
    profile` (with Python's `test_health_only_waiter_is_not_published` and
    `test_terminal_state_survives_active_run_teardown`).

    An `agent_starting` run is `starting`, a health-only waiter is left out, a pending approval is
    `waiting_for_approval`, a pending question `waiting_for_input`, a presence lease adds
    `alertEligible: false` until revoked, and `completed` outlives the run. Our port draws
    revisions from the store's shared counter (not a per-process file): the floor equals the last
    revision sent, and a restarted service continues above it.
    """
    async with relay_env(store) as env:
        profile_id = await register(env)
        env.host.create_session("s1", title="Relay run")
        env.host.start_run("s1", "stream-a", phase="agent_starting")
        env.host.create_session("s-health", title="Waiter")
        env.host.runs["stream-h"] = ActiveRun(
            "stream-h", "s-health", env.clock.now, "running", health_only=True
        )
        assert await env.publish() is None
        (state,) = last_states(env)
        assert state == {
            "sessionId": "s1",
            "streamId": "stream-a",
            "eventId": f"snapshot:{state['revision']}:s1",
            "revision": state["revision"],
            "title": "Relay run",
            "phase": "starting",
            "updatedAt": int(env.clock.now * 1000),
            "deepLink": "/sessions/s1",
        }
        assert state["revision"] >= int(env.clock.now * 1000)
        assert await store.revision_floor() == state["revision"]
        if (directory := json_dir(store)) is not None:
            revision_file = directory / "talaria-relay-revision"
            assert revision_file.read_text().strip() == str(state["revision"])
        (row,) = env.relay.rows(PUBLISHER_ID, profile_id)
        assert (row.session_id, row.phase, row.revision) == ("s1", "starting", state["revision"])

        env.host.set_run_phase("stream-a", "running")
        env.host.set_pending("s1", approval=True)
        await env.publish()
        assert [s["phase"] for s in last_states(env)] == ["waiting_for_approval"]

        env.host.set_pending("s1", clarify=True)
        await env.publish()
        assert [s["phase"] for s in last_states(env)] == ["waiting_for_input"]
        env.host.set_pending("s1")

        # A browser lease on the profile mutes alerts for every transition in the snapshot.
        assert await presence(env, "tab_00000001", True, 1) == LEASE_ON
        await env.publish()
        (state,) = last_states(env)
        assert (state["phase"], state["alertEligible"]) == ("running", False)
        assert env.relay.rows(PUBLISHER_ID, profile_id)[0].alert_eligible is False
        assert await presence(env, "tab_00000001", False, 2) == LEASE_OFF

        # The terminal state outlives the active run's teardown.
        await finish(env, "stream-a", "completed")
        await env.publish()
        (state,) = last_states(env)
        assert (state["sessionId"], state["phase"]) == ("s1", "completed")
        assert "alertEligible" not in state
        (row,) = env.relay.rows(PUBLISHER_ID, profile_id)
        assert (row.phase, row.alert_eligible) == ("completed", None)

        revisions = [s["revision"] for r in env.sent("snapshot") for s in states_of(r)]
        assert revisions == sorted(set(revisions))
        assert await store.revision_floor() == revisions[-1]

        # A restarted service continues above the last revision, even on the same millisecond.
        await env.service.stop()
        env.service = env.new_service()
        assert await env.service.start() is True
        env.host.start_run("s1", "stream-b")
        await env.publish()
        (state,) = last_states(env)
        assert (state["streamId"], state["phase"]) == ("stream-b", "running")
        assert state["revision"] > revisions[-1]


async def test_acknowledges_a_viewed_session_on_the_relay_after_the_snapshot_carrying_its_terminal_state(  # noqa: E501
    store: RelayStore,
) -> None:
    """Mirrors `acknowledges a viewed session on the relay after the snapshot carrying its terminal
    state`.

    A viewed PUT `{"through"}` follows the snapshot that carries the session's `completed` state,
    covers its `updatedAt` and acknowledges the relay's completion; an unknown session is a
    `SessionNotFoundError` (the route's 404) and sends nothing.
    """
    async with relay_env(store) as env:
        profile_id = await register(env)
        config = await env.config()
        env.host.create_session("v1", title="Viewed run")
        env.host.start_run("v1", "stream-v")
        await finish(env, "stream-v")
        env.clock.advance(1)
        mark = len(env.relay.requests)
        await env.service.mark_viewed("v1")
        assert await env.publish() is None

        snapshot, viewed = since(env, mark, "snapshot", "viewed")
        (terminal,) = states_of(snapshot)
        assert (terminal["sessionId"], terminal["phase"]) == ("v1", "completed")
        assert_signed(env, viewed, viewed_path(profile_id, "v1"), config.key_id)
        assert list(viewed.json()) == ["through"]
        assert viewed.json()["through"] >= terminal["updatedAt"]
        assert viewed.json()["through"] == int(env.clock.now * 1000)
        assert viewed.status == 200
        (ack,) = env.relay.viewed
        assert (ack.session_id, ack.acknowledged) == ("v1", 1)
        assert [c.acknowledged for c in env.relay.completions(PUBLISHER_ID, profile_id)] == [True]

        with pytest.raises(SessionNotFoundError):
            await env.service.mark_viewed("missing_session_0001")
        mark = len(env.relay.requests)
        await env.publish()
        # Sent views leave the queue; the unknown session was never queued.
        assert since(env, mark, "viewed") == []


async def test_clears_a_deleted_sessions_finished_runs_on_the_relay_and_an_already_deleted_one_when_it_is_requested(  # noqa: E501
    store: RelayStore,
) -> None:
    """Mirrors `clears a deleted session's finished runs on the relay, and an already-deleted one
    when it is requested`, with 1.20's persisted `relay/deleted` outbox (shared/seeds).

    A deletion is stored bound to the profile's relay scope and sends one viewed PUT with
    `through >= deletedAt`; a request for a session deleted earlier (here: before a restart) sends
    one more, once per process as in 1.20's `clearedDeleted`; only deleted ids reach the relay, and
    a deletion staged while the session still has data is sent only once the data is gone.
    """
    async with relay_env(store) as env:
        profile_id = await register(env)
        config = await env.config()
        env.host.create_session("d1", title="Deleted run")
        env.host.start_run("d1", "stream-d")
        await finish(env, "stream-d")
        await env.publish()
        assert [(s["sessionId"], s["phase"]) for s in last_states(env)] == [("d1", "completed")]

        env.clock.advance(1)
        deleted_at = int(env.clock.now * 1000)
        env.host.delete_session("d1")
        await env.service.clear_deleted("d1", "default")
        (queued,) = await store.pending_deleted()
        assert (queued.session_id, queued.profile, queued.through) == ("d1", "default", deleted_at)
        assert queued.identity == config.profiles["default"].identity
        assert queued.scope == DeletedScope(RELAY_URL, PUBLISHER_ID, profile_id)

        await env.publish()
        path = viewed_path(profile_id, "d1")
        (viewed,) = env.sent("viewed")
        assert_signed(env, viewed, path, config.key_id)
        assert viewed.json()["through"] >= deleted_at
        assert [c.acknowledged for c in env.relay.completions(PUBLISHER_ID, profile_id)] == [True]
        assert await store.pending_deleted() == []

        # Looking the deleted id up again in the same process does not resend (1.20).
        await env.service.clear_deleted("d1", "default")
        assert await store.pending_deleted() == []
        await env.publish()
        assert len(env.sent("viewed")) == 1

        # A session deleted before this process started clears the first time it is requested,
        # and only that once.
        await env.service.stop()
        env.service = env.new_service()
        assert await env.service.start() is True
        env.clock.advance(1)
        for _ in range(2):
            await env.service.clear_deleted("d1", "default")
            await env.publish()
        assert [r.path for r in env.sent("viewed")] == [path, path]
        assert env.sent("viewed")[1].json() == {"through": int(env.clock.now * 1000)}
        assert await store.pending_deleted() == []

        # Staged while the session still has data, a deletion waits until the data is gone.
        env.host.create_session("alive", title="Still here")
        await env.service.clear_deleted("alive", "default")
        await env.publish()
        assert len(env.sent("viewed")) == 2
        assert [v.session_id for v in await store.pending_deleted()] == ["alive"]
        env.host.delete_session("alive")
        await env.publish()
        alive_path = viewed_path(profile_id, "alive")
        assert [r.path for r in env.sent("viewed")] == [path, path, alive_path]

        # Nothing else ever reaches the relay: a pass with an empty outbox sends no view.
        await env.publish()
        assert [ack.session_id for ack in env.relay.viewed] == ["d1", "d1", "alive"]
        assert await store.pending_deleted() == []


async def test_validates_presence_payloads_and_ignores_stale_sequence_numbers(
    store: RelayStore,
) -> None:
    """Mirrors `validates presence payloads and ignores stale sequence numbers`.

    Malformed presence bodies get 400 `Invalid presence request` (an empty profile 403) and store
    nothing; renew 5 / revoke 3 / revoke 6 / renew 4 leaves the tab revoked, and a lease ends 90 s
    after the server saw it. Our port keeps leases in the store rather than in process memory, and
    keeps a tab's sequence fence 15 minutes past its lease (upstream: until the lease ends).
    """
    async with relay_env(store, profiles=("default", "work")) as env:
        invalid: list[object] = [
            {"tab_id": "short", "active": True, "seq": 1},
            {"tab_id": "tab_00000002", "active": "yes", "seq": 1},
            {"tab_id": "tab_00000002", "active": True, "seq": 1.5},
            {"tab_id": "tab_00000002", "active": True, "seq": -1},
            {"tab_id": "tab_00000002", "active": True, "seq": "1"},
            {"tab_id": "tab 0000002", "active": True, "seq": 1},
            ["tab_00000002", True, 1],
        ]
        for body in invalid:
            error = await pairing_error(env.service.update_presence(body, "default"))
            assert (str(error), error.status) == ("Invalid presence request", 400), body
        error = await pairing_error(presence(env, "tab_00000002", True, 1, profile=" "))
        assert (str(error), error.status) == ("Hermes profile is unavailable", 403)
        assert await store.presence_leases() == []

        active = env.service.presence.active
        assert await presence(env, "tab_00000003", True, 5) == LEASE_ON
        assert await presence(env, "tab_00000003", False, 3) == LEASE_OFF
        assert await active("default") is True
        assert await presence(env, "tab_00000003", False, 6) == LEASE_OFF
        assert await active("default") is False
        assert await presence(env, "tab_00000003", True, 4) == LEASE_ON
        assert await active("default") is False
        (lease,) = await store.presence_leases()
        assert (lease.profile, lease.tab_id, lease.seq, lease.active) == (
            "default",
            "tab_00000003",
            6,
            False,
        )

        assert await presence(env, "tab_00000004", True, 1, profile="work") == LEASE_ON
        assert await active("work") is True
        assert await active("default") is False
        env.clock.advance(89)
        assert await active("work") is True
        env.clock.advance(2)
        assert await active("work") is False

        # Our port fences a tab's sequence 15 minutes past its lease, where upstream forgets the
        # tombstone with the lease: the late renew 4 stays refused until the fence ends.
        assert await presence(env, "tab_00000003", True, 4) == LEASE_ON
        assert await active("default") is False
        env.clock.advance(15 * 60)
        assert await presence(env, "tab_00000003", True, 4) == LEASE_ON
        assert await active("default") is True


@WITH_FILES
async def test_enrolls_another_profile_with_a_signed_request_on_the_existing_key(
    store: RelayStore,
) -> None:
    """Mirrors `enrolls another profile with a signed request on the existing key` (and Python's
    `test_profile_enrollment_reuses_the_registered_publisher_key`).

    Enrollment sends exactly `{invitation, publisherId, profileId}` signed with the registered key,
    reusing the mapped scope for a known profile and a new one for a new profile, whose validation
    snapshot goes to that scope alone; the other mappings stay as they were and profiles are
    stored sorted by name.
    """
    async with relay_env(store, profiles=("work", "default")) as env:
        default_id = await register(env)
        before = await env.config()

        invitation = env.relay.mint_invitation("usr_owner")
        mark = len(env.relay.requests)
        answer = await env.pair("default", operator=False, publisher_invitation=invitation)
        assert answer == {"ok": True, "publisher_id": PUBLISHER_ID}
        redeem, validation = since(env, mark, "profile_redeem", "snapshot")
        assert_signed(env, redeem, PROFILE_REDEEM, before.key_id)
        assert redeem.json() == {
            "invitation": invitation,
            "publisherId": PUBLISHER_ID,
            "profileId": default_id,
        }
        assert list(redeem.json()) == ["invitation", "publisherId", "profileId"]
        assert redeem.status == 201
        assert (validation.path, validation.status) == (relay_path(default_id, "snapshot"), 200)
        after = await env.config()
        assert after.profiles["default"] == before.profiles["default"]
        assert (after.key_id, after.key_ref) == (before.key_id, before.key_ref)

        invitation = env.relay.mint_invitation("usr_work")
        mark = len(env.relay.requests)
        await env.pair("work", operator=False, publisher_invitation=invitation)
        redeem, *snapshots = since(env, mark, "profile_redeem", "snapshot")
        assert_signed(env, redeem, PROFILE_REDEEM, before.key_id)
        work_id = redeem.json()["profileId"]
        assert re.fullmatch(r"prf_[0-9a-f]{32}", work_id)
        assert work_id != default_id
        assert redeem.json() == {
            "invitation": invitation,
            "publisherId": PUBLISHER_ID,
            "profileId": work_id,
        }
        # The validation publish covers the new profile only.
        assert [r.path for r in snapshots] == [relay_path(work_id, "snapshot")]

        config = await env.config()
        assert list(config.profiles) == ["default", "work"]
        assert config.profiles["default"] == before.profiles["default"]
        assert config.profiles["work"] == ProfileGrant(
            await store.profile_identity("work"), work_id
        )
        assert len(env.relay.keys(PUBLISHER_ID)) == 1
        if (state := json_dir(store)) is not None:
            saved = json.loads((state / "talaria-relay.json").read_text())
            assert list(saved) == CONFIG_FILE_KEYS
            assert list(saved["profiles"]) == ["default", "work"]


async def test_surfaces_relay_rejections_as_409_502_without_persisting_a_broken_registration(
    store: RelayStore,
) -> None:
    """Mirrors `surfaces relay rejections as 409/502 without persisting a broken registration`
    (and Python's `test_profile_enrollment_http_rejection_is_not_reported_as_reachability`).

    A relay 4xx on a redeem is 409 and a 5xx 502, each naming the HTTP status, and a failed
    registration stores nothing; a 503 on the validation snapshot is 502 `Could not publish the
    initial Talaria Relay snapshot`, the stored registration is unchanged and the running
    publisher is kept.
    """
    async with relay_env(store) as env:
        for status, answer in ((400, 409), (500, 502)):
            env.relay.inject("publisher_redeem", status)
            error = await pairing_error(env.pair())
            assert (str(error), error.status) == (
                f"Talaria Relay rejected server registration (HTTP {status})",
                answer,
            )
        assert await store.load_config() is None
        assert env.service.current() is None

        await register(env)
        before = await env.config()
        publisher = env.service.current()
        for status, answer in ((401, 409), (503, 502)):
            env.relay.inject("profile_redeem", status)
            error = await pairing_error(env.pair(operator=False))
            assert (str(error), error.status) == (
                f"Talaria Relay rejected the profile enrollment (HTTP {status})",
                answer,
            )

        env.relay.inject("snapshot", 503)
        mark = len(env.relay.requests)
        error = await pairing_error(env.pair())
        assert (str(error), error.status) == (
            "Could not publish the initial Talaria Relay snapshot",
            502,
        )
        assert [(r.route, r.status) for r in env.relay.requests[mark:]] == [
            ("profile_redeem", 201),
            ("snapshot", 503),
        ]
        assert await env.config() == before
        assert env.service.current() is publisher


# ── relay.test.ts: 'relay publisher failure handling' ─────────────────────────


async def test_isolates_a_permanent_failure_to_one_profile_and_raises_retryable_ones(
    store: RelayStore,
) -> None:
    """Mirrors `isolates a permanent failure to one profile and raises retryable ones` (and
    Python's `test_publisher_attempts_every_profile_before_retryable_backoff`).

    A 503 is raised only after every profile was attempted, backs off (logged `failed`, then
    `still failing`) and a later success logs `recovered`; a 403 disables that profile alone after
    one attempt, with a log line; a 503 raises `HTTP 503` with and without isolation.
    """
    async with relay_env(store, profiles=("default", "work")) as env:
        default_id = await register(env)
        work_id = await enroll_work(env)
        default_path, work_path = (
            relay_path(default_id, "snapshot"),
            relay_path(work_id, "snapshot"),
        )

        def pass_snapshots(mark: int) -> list[tuple[str, int]]:
            return [(r.path, r.status) for r in since(env, mark, "snapshot")]

        env.relay.inject("snapshot", 503)
        mark = len(env.relay.requests)
        assert await env.publish() == 5.0
        assert pass_snapshots(mark) == [(default_path, 503), (work_path, 200)]
        assert env.logs[-1] == (
            "[relay] Talaria relay snapshot failed for profile default "
            "(Talaria relay returned HTTP 503); "
            "retrying in 5.0s"
        )
        env.relay.inject("snapshot", 503)
        assert await env.publish() == 10.0
        assert env.logs[-1].startswith(
            "[relay] Talaria relay snapshot still failing for profile default ("
        )
        assert await env.publish() is None
        assert env.logs[-1] == "[relay] Talaria relay snapshot recovered"

        env.relay.inject("snapshot", 403)
        mark = len(env.relay.requests)
        assert await env.publish() is None
        assert pass_snapshots(mark) == [(default_path, 403), (work_path, 200)]
        disabled = "[relay] Talaria relay disabled profile default after permanent HTTP 403"
        assert env.logs.count(disabled) == 1
        mark = len(env.relay.requests)
        assert await env.publish() is None
        assert pass_snapshots(mark) == [(work_path, 200)]

        env.relay.inject("snapshot", 503)
        with pytest.raises(RelayHttpError, match="HTTP 503"):
            await env.publisher.publish_snapshot(isolate_permanent=True)
        env.relay.inject("snapshot", 503)
        with pytest.raises(RelayHttpError, match="HTTP 503"):
            await env.publisher.publish_snapshot()
        assert env.service.current() is not None


async def test_stamps_a_terminal_row_with_the_moment_its_turn_ended_not_the_snapshot_build_time(
    store: RelayStore,
) -> None:
    """Mirrors `stamps a terminal row with the moment its turn ended, not the snapshot build time`.

    A run that completed 5 s before the snapshot is sent with `updatedAt` of its end, while a live
    run carries the build time; the relay stores those times, and the terminal state is sent until
    15 minutes after its turn ended.
    """
    async with relay_env(store) as env:
        profile_id = await register(env)
        env.host.create_session("t1", title="Ended run")
        env.host.start_run("t1", "stream-t")
        await finish(env, "stream-t")
        env.clock.advance(5)
        env.host.create_session("t2", title="Live run")
        env.host.start_run("t2", "stream-l")
        await env.publish()
        by_session = {s["sessionId"]: s for s in last_states(env)}
        assert (by_session["t1"]["phase"], by_session["t1"]["updatedAt"]) == (
            "completed",
            1_800_000_000_000,
        )
        assert by_session["t2"]["updatedAt"] == 1_800_000_005_000
        rows = {r.session_id: r.updated_at for r in env.relay.rows(PUBLISHER_ID, profile_id)}
        assert rows == {"t1": 1_800_000_000_000, "t2": 1_800_000_005_000}

        # The terminal state is kept 15 minutes from the end of its turn, then left out.
        env.clock.advance(15 * 60 - 5)
        await env.publish()
        assert {s["sessionId"]: s["updatedAt"] for s in last_states(env)}["t1"] == 1_800_000_000_000
        env.clock.advance(1)
        await env.publish()
        assert [s["sessionId"] for s in last_states(env)] == ["t2"]


async def test_treats_viewed_as_a_no_op_without_a_relay_and_logs_an_old_relay_once(
    store: RelayStore,
) -> None:
    """Mirrors `treats viewed as a no-op without a relay and logs an old relay once`.

    Without a registration a view sends nothing; against a relay that answers 404 to viewed, each
    view is sent once and dropped, the 404 is logged once, and the publisher keeps publishing
    without backing off (§1.3: another permanent status is logged each time and dropped, a
    retryable one backs off and the view is sent again).
    """
    async with relay_env(store) as env:
        env.host.create_session("u1", title="Unpaired")
        await env.service.mark_viewed("u1")  # no publisher: nothing to do, no error
        assert env.relay.requests == []

        await register(env)
        # Another permanent refusal is logged each time and drops the view, without backoff.
        env.relay.inject("viewed", 400)
        await env.service.mark_viewed("u1")
        assert await env.publish() is None
        assert env.logs[-1] == (
            "[relay] Talaria relay rejected a viewed acknowledgement for profile default (HTTP 400)"
        )
        # A retryable one backs off and keeps the view, sent again on the next pass.
        env.relay.inject("viewed", 503)
        await env.service.mark_viewed("u1")
        assert await env.publish() == 5.0
        assert await env.publish() is None
        assert [r.status for r in env.sent("viewed")] == [400, 503, 200]
        mark = len(env.relay.requests)

        env.relay.unsupported.add("viewed")
        for count in (1, 2):
            await env.service.mark_viewed("u1")
            assert await env.publish() is None
            assert [r.status for r in since(env, mark, "viewed")] == [404] * count
        unsupported = [
            line for line in env.logs if "does not support viewed acknowledgements" in line
        ]
        assert unsupported == [
            "[relay] Talaria relay does not support viewed acknowledgements (HTTP 404); "
            "Live Activities clear only from the app"
        ]

        # The refused views were dropped; the publisher is up and still publishing.
        mark = len(env.relay.requests)
        assert await env.publish() is None
        assert [r.route for r in since(env, mark, "snapshot", "viewed")] == ["snapshot"]
        assert env.service.current() is not None
        assert not any("stopped" in line for line in env.logs)


@WITH_FILES
async def test_requires_an_owner_registration_before_profile_enrollment_and_refuses_v1_state(
    store: RelayStore,
) -> None:
    """Mirrors `requires an owner registration before profile enrollment and refuses v1 state`.

    Enrolling without a registration is 409 with no relay call and nothing stored, and the service
    starts without a publisher; on the JSON backend a v1 config file counts as no registration.
    """
    async with relay_env(store) as env:
        error = await pairing_error(env.pair(operator=False))
        assert (str(error), error.status) == (OWNER_REQUIRED, 409)
        assert env.relay.requests == []
        assert await env.service.start() is False
        assert env.service.current() is None
        assert await store.load_config() is None
        state = json_dir(store)
        if state is None:
            return
        config_file = state / "talaria-relay.json"
        assert not config_file.exists()

        # A registration the v1 publisher wrote has to be made again.
        v1 = {"url": RELAY_URL, "publisher_id": PUBLISHER_ID, "key_id": "k", "version": 1}
        config_file.write_text(json.dumps(v1))
        assert await store.load_config() is None
        assert await env.service.start() is False
        error = await pairing_error(env.pair(operator=False))
        assert (str(error), error.status) == (OWNER_REQUIRED, 409)
        assert env.relay.requests == []
        assert json.loads(config_file.read_text()) == v1


async def test_validated_origin_and_relay_pairing_error_mirror_the_python_guards() -> None:
    """Mirrors `validatedOrigin and RelayPairingError mirror the Python guards`.

    `validated_origin` trims a trailing slash, requires HTTPS when asked, and refuses credentials,
    paths, queries and fragments; `RelayPairingError` carries its message and status.
    """
    assert validated_origin("https://a.example/") == "https://a.example"
    assert validated_origin("  http://A.example:8080// ") == "http://A.example:8080"
    with pytest.raises(InvalidInputError, match="HTTPS origin"):
        validated_origin("http://a.example", True)
    for bad in (
        "https://u:p@a.example",
        "https://a.example/x",
        "https://a.example?q",
        "https://a.example#f",
        "ftp://a.example",
        "https://",
    ):
        with pytest.raises(InvalidInputError, match=r"HTTP\(S\) origin"):
            validated_origin(bad)
    error = RelayPairingError("m", 409)
    assert (str(error), error.status) == ("m", 409)


# ── deliberate differences of our port ────────────────────────────────────────


async def test_caps_a_snapshot_at_the_500_most_recent_states_and_titles_blank_sessions_untitled(
    store: RelayStore,
) -> None:
    """Extends `publishes active runs, pending prompts, and terminal phases for the enrolled
    profile` with three deliberate differences of our port.

    Upstream sends every state (and the relay refuses more than 500) and passes a whitespace-only
    title on (which the relay refuses); our port keeps the 500 most recent states and sends a
    blank title as `Untitled`, and caps a title at 120 characters. Upstream stops sending a run
    that leaves the host without an outcome; ours sends it once as `failed` (issue 15).
    """
    async with relay_env(store) as env:
        profile_id = await register(env)
        # The oldest state: a run that ended a second before the live ones were built.
        env.host.create_session("old", title="   ", messages=0)
        env.host.start_run("old", "stream-old")
        await finish(env, "stream-old")
        assert await env.publish() is None
        assert [(s["sessionId"], s["title"], s["phase"]) for s in last_states(env)] == [
            ("old", "Untitled", "completed")
        ]
        env.clock.advance(1)
        for index in range(500):
            sid = f"live-{index:03d}"
            env.host.create_session(sid, title="t" * 130 if index == 0 else "   ", messages=0)
            env.host.start_run(sid)
        assert await env.publish() is None

        states = last_states(env)
        assert len(states) == 500
        assert {s["sessionId"] for s in states} == {f"live-{i:03d}" for i in range(500)}
        titles = {s["sessionId"]: s["title"] for s in states}
        assert titles["live-000"] == "t" * 120
        assert titles["live-001"] == "Untitled"
        # The 500 live rows, and the relay's row of `old` from the snapshot before.
        assert len(env.relay.rows(PUBLISHER_ID, profile_id)) == 501

        # The live runs leave the host without an outcome: each is sent once more, as failed.
        for index in range(500):
            env.host.end_run(f"stream-live-{index:03d}")
        env.clock.advance(1)
        await env.publish()
        states = last_states(env)
        assert len(states) == 500
        assert {s["phase"] for s in states} == {"failed"}
        assert {s["sessionId"] for s in states} == {f"live-{i:03d}" for i in range(500)}
