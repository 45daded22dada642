"""The Python original's relay tests (spec §6.4) mirrored on the port, on the memory store.

Upstream drives module globals with a fake opener; here a `RelayService` pairs and publishes
against the dev relay. Where upstream checks a file (the config, the 0600 key), the port checks
the `RelayStore`; the key's file mode only exists on the JSON backend, so that test runs there too,
and a v1 registration can only be written behind the back of a real store.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from backends import MEMORY, REAL, on
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from databases import behind_the_store
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env, restarted
from sqlalchemy import update

from relay.errors import RelayHttpError, RelayPairingError
from relay.host import ActiveRun
from relay.protocol import REQUEST_TIMEOUT_S, canonical_string
from relay.publishing.loop import backoff_delay
from relay.publishing.signing import load_key
from relay.service import RelayService
from relay.store import RelayStore, resolve
from relay.store.sql import schema as tables
from relay.testing import RecordedRequest, route_of
from relay.testing.clock import START
from relay.testing.devrelay.validation import b64url_decode

pytestmark = on(MEMORY)

ENCODED_PUBLISHER = "https%3A%2F%2Fhermes.example"
PRF = re.compile(r"prf_[0-9a-f]{32}")
PFI = re.compile(r"pfi_[0-9a-f]{32}")


def pair_request(env: Env, user: str, **body: Any) -> dict[str, Any]:
    return {
        "relay_url": RELAY_URL,
        "publisher_id": PUBLISHER_ID,
        "publisher_invitation": env.relay.mint_invitation(user),
        **body,
    }


def snapshot_path(scope: str) -> str:
    return f"/v1/publishers/{ENCODED_PUBLISHER}/profiles/{scope}/snapshot"


def snapshots_to(env: Env, scope: str) -> list[RecordedRequest]:
    return [r for r in env.sent("snapshot") if r.path == snapshot_path(scope)]


def states(request: RecordedRequest) -> list[dict[str, Any]]:
    return list(request.json()["states"])


def running(env: Env, session_id: str, profile: str = "default", phase: str = "running") -> None:
    env.host.create_session(session_id, profile=profile, title=f"Title {session_id}")
    env.host.start_run(session_id, phase=phase)


# ── pairing ──────────────────────────────────────────────────────────────────


async def test_pairing_persists_private_key_and_starts_publisher(store: RelayStore) -> None:
    """Mirrors `test_pairing_persists_private_key_and_starts_publisher`: registration sends an
    unsigned redeem with a fresh scope and public key, then stores the key and a version 2
    registration naming the relay's key id, and runs a publisher on it."""
    async with relay_env(store) as env:
        wire = env.wire
        result = await env.pair(label="Home Hermes")
        assert result == {"ok": True, "publisher_id": PUBLISHER_ID}

        (redeem,) = env.sent("publisher_redeem")
        body = redeem.json()
        assert set(body) == {"invitation", "publisherId", "profileId", "label", "publicKey"}
        assert (body["publisherId"], body["label"]) == (PUBLISHER_ID, "Home Hermes")
        assert PRF.fullmatch(body["profileId"])
        assert not any(name.startswith("x-talaria-") for name in redeem.headers)
        assert str(wire.requests[0].url) == f"{RELAY_URL}/v1/pairings/publisher/redeem"
        assert wire.requests[0].extensions["timeout"]["read"] == REQUEST_TIMEOUT_S == 10

        config = await env.config()
        (key_info,) = env.relay.keys(PUBLISHER_ID)
        assert (config.url, config.publisher_id, config.key_id) == (
            RELAY_URL,
            PUBLISHER_ID,
            key_info.key_id,
        )
        assert set(config.profiles) == {"default"}
        assert config.profiles["default"].profile_id == body["profileId"]
        assert PFI.fullmatch(config.profiles["default"].identity)
        key = load_key(await store.load_key(config.key_ref))
        raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        assert raw == b64url_decode(body["publicKey"]) == b64url_decode(key_info.public_key)

        assert env.publisher.config == config
        assert [r.status for r in env.sent("snapshot")] == [200]
        env.host.create_session("s1")
        env.host.start_run("s1")
        assert await env.publish() is None
        assert [row.session_id for row in env.relay.rows(PUBLISHER_ID, body["profileId"])] == ["s1"]


@on(MEMORY, "json")
async def test_pairing_private_key_is_0600_before_any_post_write_failure(
    store: RelayStore, backend: str
) -> None:
    """Mirrors `test_pairing_private_key_is_0600_before_any_post_write_failure`: when starting
    the publisher fails after the relay registered the key, the saved key is durable, private
    (0600 even under umask 0 on the JSON backend) and usable by the next start."""
    async with relay_env(store) as env:
        env.relay.inject("snapshot", 503)
        previous_umask = os.umask(0)
        try:
            with pytest.raises(RelayPairingError, match="initial Talaria Relay snapshot") as raised:
                await env.pair()
        finally:
            os.umask(previous_umask)
        assert raised.value.status == 502
        assert env.service.current() is None

        config = await env.config()
        load_key(await store.load_key(config.key_ref))
        if backend == "json":
            mode = await asyncio.to_thread(lambda: Path(config.key_ref).stat().st_mode)
            assert mode & 0o777 == 0o600
        env.host.create_session("s1")
        env.host.start_run("s1")
        async with restarted(env) as publisher:
            assert await publisher.run_once() is None
        assert [row.session_id for row in env.relay.rows(PUBLISHER_ID, await env.profile_id())] == [
            "s1"
        ]


async def test_server_registration_rejects_v1_relay_response_without_persisting(
    store: RelayStore,
) -> None:
    """Mirrors `test_server_registration_rejects_v1_relay_response_without_persisting`: a redeem
    answer without `protocolVersion: 2` is an invalid response and nothing is saved."""
    async with relay_env(store) as env:
        wire = env.wire
        wire.answer("publisher_redeem", 201, {"keyId": "legacy-key", "publisherId": PUBLISHER_ID})
        with pytest.raises(RelayPairingError, match="invalid response") as raised:
            await env.pair()
        assert raised.value.status == 502
        assert await store.load_config() is None
        assert env.service.current() is None
        assert [route_of(r.method, r.url.raw_path.decode()) for r in wire.requests] == [
            "publisher_redeem"
        ]


async def test_server_registration_rejects_unmarked_profile_scope_mismatch(
    store: RelayStore,
) -> None:
    """Mirrors `test_server_registration_rejects_unmarked_profile_scope_mismatch`: a relay that
    answers another profile scope without `profileIdPreserved` is refused and nothing is saved."""
    async with relay_env(store) as env:
        wire = env.wire
        answer = {
            "protocolVersion": 2,
            "keyId": "key-created",
            "publisherId": PUBLISHER_ID,
            "profileId": "prf_mismatched",
            "profileIdPreserved": False,
        }
        wire.answer("publisher_redeem", 201, answer)
        with pytest.raises(RelayPairingError, match="invalid response") as raised:
            await env.pair()
        assert raised.value.status == 502
        assert await store.load_config() is None
        assert env.sent("snapshot") == []


async def test_pairing_rejects_an_untrusted_relay_origin(store: RelayStore) -> None:
    """Mirrors `test_pairing_rejects_an_untrusted_relay_origin`: a relay origin other than the
    trusted one is refused with 400 before any request."""
    async with relay_env(store) as env:
        with pytest.raises(RelayPairingError, match="Untrusted") as raised:
            await env.pair(relay_url="https://internal.example.com")
        assert raised.value.status == 400
        assert env.relay.requests == []
        assert await store.load_config() is None


async def downgrade_to_v1(backend: str, store_url: str, store: RelayStore) -> None:
    """Make the saved registration a version 1 one, as an older server left it."""
    config = await store.load_config()
    assert config is not None
    if backend == "json":
        legacy = {
            "url": config.url,
            "publisher_id": config.publisher_id,
            "key_id": config.key_id,
            "private_key_path": config.key_ref,
        }
        state_dir = resolve(store_url).path
        assert state_dir is not None
        await asyncio.to_thread((state_dir / "talaria-relay.json").write_text, json.dumps(legacy))
        return
    await behind_the_store(store_url, update(tables.config).values(version=1))


@on(*REAL)
async def test_v1_relay_state_requires_registration_again(
    store: RelayStore, store_url: str, backend: str
) -> None:
    """Mirrors `test_v1_relay_state_requires_registration_again`: a version 1 registration reads
    as none, so no publisher starts, enrollment needs an owner, and the owner registers again."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        await downgrade_to_v1(backend, store_url, store)
        assert await store.load_config() is None

        service = env.new_service()
        assert await service.start() is False
        assert service.current() is None
        with pytest.raises(RelayPairingError, match="owner must register") as raised:
            await service.pair(pair_request(env, "usr_work"), "work", operator=False)
        assert raised.value.status == 409
        assert await service.pair(pair_request(env, "usr_owner"), "default", operator=True) == {
            "ok": True,
            "publisher_id": PUBLISHER_ID,
        }
        assert set((await env.config()).profiles) == {"default"}
        await service.stop()


# ── identity ─────────────────────────────────────────────────────────────────


async def test_profile_identity_is_persistent_and_changes_after_recreation(
    store: RelayStore,
) -> None:
    """Mirrors `test_profile_identity_is_persistent_and_changes_after_recreation`: a profile's
    identity is minted once and kept, and a recreated profile gets a new one."""
    first = await store.profile_identity("work")
    assert PFI.fullmatch(first)
    assert await store.profile_identity("work") == first
    await store.forget_profile_identity("work")
    second = await store.profile_identity("work")
    assert PFI.fullmatch(second)
    assert second != first


async def test_enrollment_snapshot_revalidates_captured_profile_identity(
    store: RelayStore,
) -> None:
    """Mirrors `test_enrollment_snapshot_revalidates_captured_profile_identity`: a validation
    publish whose profile was recreated since its identity was captured fails with 409 and sends
    nothing."""
    async with relay_env(store) as env:
        await env.pair()
        grant = (await env.config()).profiles["default"]
        await store.forget_profile_identity("default")
        before = len(env.relay.requests)
        with pytest.raises(RelayPairingError, match="changed during relay enrollment") as raised:
            await env.publisher.publish_profile(grant.profile_id, grant.identity)
        assert raised.value.status == 409
        assert len(env.relay.requests) == before


# ── publisher swap ───────────────────────────────────────────────────────────


async def test_pairing_confirms_initial_snapshot_before_switching_publishers(
    store: RelayStore,
) -> None:
    """Mirrors `test_pairing_confirms_initial_snapshot_before_switching_publishers`: the new
    publisher replaces the old one only after its validation snapshot was accepted, and starts
    without publishing again."""
    async with relay_env(store, profiles=("default", "work")) as env:
        wire = env.wire
        await env.pair()
        old = env.publisher
        gate = wire.hold("snapshot")
        enrolling = asyncio.create_task(env.pair("work", user="usr_work"))
        await asyncio.wait_for(wire.held.wait(), 1)
        assert env.service.current() is old
        gate.set()
        await enrolling
        assert env.service.current() is not old
        assert set(env.publisher.config.profiles) == {"default", "work"}
        assert [r.status for r in snapshots_to(env, await env.profile_id("work"))] == [200]
        assert len(env.sent("snapshot")) == 2  # registration and enrollment, no initial publish


@pytest.mark.parametrize("has_previous", [True, False])
async def test_blocked_candidate_publish_does_not_hold_publisher_registry_lock(
    store: RelayStore, has_previous: bool
) -> None:
    """Mirrors `test_blocked_candidate_publish_does_not_hold_publisher_registry_lock`: while a
    validation publish is blocked, terminal notes, views, presence, deletions and the current
    publisher's passes complete; the terminal phase noted meanwhile reaches the new publisher,
    and the view and the deletion are acknowledged."""
    async with relay_env(store, profiles=("default", "work")) as env:
        wire = env.wire
        if has_previous:
            await env.pair()
        running(env, "sess", profile="work" if has_previous else "default")
        env.host.create_session("gone")
        gate = wire.hold("snapshot")
        if has_previous:
            pairing = asyncio.create_task(env.pair("work", user="usr_work"))
        else:
            pairing = asyncio.create_task(env.pair())
        await asyncio.wait_for(wire.held.wait(), 1)

        await asyncio.wait_for(env.service.note_terminal("stream-sess", "completed"), 1)
        await asyncio.wait_for(env.service.mark_viewed("sess"), 1)
        presence = {"tab_id": "tab_0000001", "active": True, "seq": 1}
        await asyncio.wait_for(env.service.update_presence(presence, "default"), 1)
        env.host.delete_session("gone")
        await asyncio.wait_for(env.service.clear_deleted("gone", "default"), 1)
        if has_previous:
            assert await asyncio.wait_for(env.publish(), 1) is None
        assert not pairing.done()

        gate.set()
        assert (await pairing)["ok"] is True
        assert env.publisher.terminal["sess"].phase == "completed"
        assert await env.publish() is None
        assert {ack.session_id for ack in env.relay.viewed} == {"sess", "gone"}
        assert await store.pending_deleted() == []


async def test_a_view_marked_during_a_swap_is_acknowledged_by_the_new_publisher(
    store: RelayStore,
) -> None:
    """Spec §3.5 (swap): a view of the profile being enrolled, marked while its validation
    publish is in flight and followed by a pass of the old publisher, is not lost: the relay
    acknowledges the completion in the new scope."""
    async with relay_env(store, profiles=("default", "work")) as env:
        wire = env.wire
        await env.pair()
        running(env, "sess", profile="work")
        await env.service.note_terminal("stream-sess", "completed")
        env.host.end_run("stream-sess")
        gate = wire.hold("snapshot")
        pairing = asyncio.create_task(env.pair("work", user="usr_work"))
        await asyncio.wait_for(wire.held.wait(), 1)
        await env.service.mark_viewed("sess")
        assert await env.publish() is None  # the old publisher's pass: no `work` grant
        gate.set()
        await pairing
        assert await env.publish() is None
        work = await env.profile_id("work")
        assert [(ack.profile_id, ack.session_id) for ack in env.relay.viewed] == [(work, "sess")]
        (completion,) = env.relay.completions(PUBLISHER_ID, work)
        assert completion.acknowledged


async def test_publisher_reconfiguration_preserves_unpublished_terminal_state(
    store: RelayStore,
) -> None:
    """Mirrors `test_publisher_reconfiguration_preserves_unpublished_terminal_state`: a finished
    run noted before a swap and not yet published is in the new publisher's validation snapshot
    (its own profile) and its next pass (the other profile)."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        for session_id, profile in (("s-default", "default"), ("s-work", "work")):
            running(env, session_id, profile=profile)
            await env.service.note_terminal(f"stream-{session_id}", "completed")
            env.host.end_run(f"stream-{session_id}")

        await env.pair("work", user="usr_work")
        default, work = await env.profile_id(), await env.profile_id("work")
        (validation,) = snapshots_to(env, work)
        assert [(s["sessionId"], s["phase"]) for s in states(validation)] == [
            ("s-work", "completed")
        ]
        assert await env.publish() is None
        assert [(s["sessionId"], s["phase"]) for s in states(snapshots_to(env, default)[-1])] == [
            ("s-default", "completed")
        ]
        for scope, session_id in ((default, "s-default"), (work, "s-work")):
            (row,) = env.relay.rows(PUBLISHER_ID, scope)
            assert (row.session_id, row.phase) == (session_id, "completed")


async def test_publisher_reconfiguration_validates_only_new_profile(store: RelayStore) -> None:
    """Mirrors `test_publisher_reconfiguration_validates_only_new_profile`: enrolling a profile
    publishes that profile's snapshot only, not a full snapshot of every profile."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        running(env, "s-default")
        before = len(env.sent("snapshot"))
        await env.pair("work", user="usr_work")
        assert [r.path for r in env.sent("snapshot")[before:]] == [
            snapshot_path(await env.profile_id("work"))
        ]


# ── enrollment ───────────────────────────────────────────────────────────────


async def test_profile_bound_session_can_enroll_without_operator_access(
    store: RelayStore,
) -> None:
    """Mirrors `test_profile_bound_session_can_enroll_without_operator_access`: once the owner
    registered the server, a profile enrolls itself without operator access.

    The route-level half of upstream (403 `Talaria Relay pairing requires an operator session`)
    belongs to the web app's HTTP routes, which this package does not have.
    """
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        assert await env.pair("work", user="usr_work", operator=False) == {
            "ok": True,
            "publisher_id": PUBLISHER_ID,
        }
        assert set((await env.config()).profiles) == {"default", "work"}


async def test_profile_enrollment_requires_an_existing_owner_registration(
    store: RelayStore,
) -> None:
    """Mirrors `test_profile_enrollment_requires_an_existing_owner_registration`: without a
    registration a non-operator enrollment is refused with 409, sends nothing, saves nothing."""
    async with relay_env(store, profiles=("default", "work")) as env:
        with pytest.raises(RelayPairingError, match="owner must register") as raised:
            await env.pair("work", operator=False)
        assert raised.value.status == 409
        assert env.relay.requests == []
        assert await store.load_config() is None


async def test_profile_enrollment_reuses_the_registered_publisher_key(store: RelayStore) -> None:
    """Mirrors `test_profile_enrollment_reuses_the_registered_publisher_key`: enrollment is a
    redeem signed with the existing key, carrying no new public key, and adds one mapping."""
    async with relay_env(store, profiles=("default", "work")) as env:
        wire = env.wire
        await env.pair()
        before = await env.config()
        await env.pair("work", user="usr_work", operator=False)

        (redeem,) = env.sent("profile_redeem")
        assert redeem.status == 201
        assert str(wire.requests[-2].url) == f"{RELAY_URL}/v1/pairings/profile/redeem"
        body = redeem.json()
        assert set(body) == {"invitation", "publisherId", "profileId"}
        assert body["publisherId"] == PUBLISHER_ID
        assert redeem.headers["x-talaria-key-id"] == before.key_id
        after = await env.config()
        assert after.key_id == before.key_id
        assert len(env.relay.keys(PUBLISHER_ID)) == 1
        assert after.profiles["default"] == before.profiles["default"]
        assert after.profiles["work"].profile_id == body["profileId"]
        assert after.profiles["work"].identity == await store.profile_identity("work")


async def test_concurrent_profile_enrollments_preserve_both_mappings(store: RelayStore) -> None:
    """Mirrors `test_concurrent_profile_enrollments_preserve_both_mappings`: two enrollments
    started together on one service both end up in the saved registration."""
    async with relay_env(store, profiles=("default", "alice", "bob")) as env:
        wire = env.wire
        await env.pair()
        gate = wire.hold("profile_redeem")
        alice = asyncio.create_task(env.pair("alice", user="usr_alice", operator=False))
        await asyncio.wait_for(wire.held.wait(), 1)
        bob = asyncio.create_task(env.pair("bob", user="usr_bob", operator=False))
        await asyncio.sleep(0)
        gate.set()
        assert (await alice)["ok"] is True
        assert (await bob)["ok"] is True
        assert set((await env.config()).profiles) == {"default", "alice", "bob"}
        assert set(env.publisher.config.profiles) == {"default", "alice", "bob"}


async def test_concurrent_enrollments_on_two_replicas_preserve_both_mappings(
    store: RelayStore,
) -> None:
    """Port (many replicas on one store): an enrollment that completes on another replica while
    this replica's enrollment is in flight is kept when this one saves."""
    async with relay_env(store, profiles=("default", "alice", "bob")) as env:
        wire = env.wire
        await env.pair()
        other = env.new_service()
        assert await other.start()
        gate = wire.hold("profile_redeem")
        alice = asyncio.create_task(env.pair("alice", user="usr_alice", operator=False))
        await asyncio.wait_for(wire.held.wait(), 1)
        assert (await other.pair(pair_request(env, "usr_bob"), "bob", operator=False))["ok"]
        gate.set()
        assert (await alice)["ok"] is True
        await other.stop()
        assert set((await env.config()).profiles) == {"default", "alice", "bob"}


async def test_recreated_profile_receives_a_new_relay_scope(store: RelayStore) -> None:
    """Mirrors `test_recreated_profile_receives_a_new_relay_scope`: a profile recreated under the
    same name publishes nothing to its old scope, and enrolling it again gives a new scope."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        await env.pair("work", user="usr_work")
        old_scope = await env.profile_id("work")
        old_identity = (await env.config()).profiles["work"].identity
        await store.forget_profile_identity("work")  # deleted, then created again
        running(env, "w1", profile="work")
        before = len(snapshots_to(env, old_scope))
        assert await env.publish() is None
        assert len(snapshots_to(env, old_scope)) == before

        await env.pair("work", user="usr_work", operator=False)
        body = env.sent("profile_redeem")[-1].json()
        assert body["profileId"] != old_scope
        grant = (await env.config()).profiles["work"]
        assert grant.profile_id == body["profileId"]
        assert grant.identity == await store.profile_identity("work") != old_identity


async def test_profile_enrollment_http_rejection_is_not_reported_as_reachability(
    store: RelayStore,
) -> None:
    """Mirrors `test_profile_enrollment_http_rejection_is_not_reported_as_reachability`: a 401
    from the relay is a 409 rejection naming the status, not "could not reach"."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        before = await env.config()
        env.relay.inject("profile_redeem", 401)
        with pytest.raises(RelayPairingError, match=r"rejected.*HTTP 401") as raised:
            await env.pair("work", user="usr_work", operator=False)
        assert raised.value.status == 409
        after = await env.config()
        assert (after, after.generation) == (before, before.generation)


# ── snapshots ────────────────────────────────────────────────────────────────


async def test_signed_snapshot_contains_all_active_sessions(store: RelayStore) -> None:
    """Mirrors `test_signed_snapshot_contains_all_active_sessions`: one snapshot to the encoded
    publisher path carries every active session, and its signature verifies over
    `PUT\\n<path>\\n<ts>\\n<nonce>\\n<body hash>` with the registered key."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        running(env, "a")
        running(env, "b", phase="starting")
        assert await env.publish() is None

        request = env.sent("snapshot")[-1]
        path = snapshot_path(await env.profile_id())
        assert request.path == path
        assert wire.requests[-1].extensions["timeout"]["read"] == 10
        by_id = {state["sessionId"]: state for state in states(request)}
        assert set(by_id) == {"a", "b"}
        assert (by_id["a"]["phase"], by_id["b"]["phase"]) == ("running", "starting")
        headers = request.headers
        message = canonical_string(
            "PUT", path, headers["x-talaria-timestamp"], headers["x-talaria-nonce"], request.body
        )
        public = env.relay.public_key(headers["x-talaria-key-id"])
        public.verify(b64url_decode(headers["x-talaria-signature"]), message)


async def test_signed_snapshot_contains_only_the_enrolled_profile(store: RelayStore) -> None:
    """Mirrors `test_signed_snapshot_contains_only_the_enrolled_profile`: each profile's
    snapshot goes to its own scope and carries only its own sessions."""
    async with relay_env(store, profiles=("alice", "bob")) as env:
        await env.pair("alice")
        await env.pair("bob", user="usr_bob")
        running(env, "a", profile="alice")
        running(env, "b", profile="bob")
        before = len(env.sent("snapshot"))
        assert await env.publish() is None
        alice, bob = env.sent("snapshot")[before:]
        assert alice.path == snapshot_path(await env.profile_id("alice"))
        assert bob.path == snapshot_path(await env.profile_id("bob"))
        assert [s["sessionId"] for s in states(alice)] == ["a"]
        assert [s["sessionId"] for s in states(bob)] == ["b"]


async def test_terminal_state_survives_active_run_teardown(store: RelayStore) -> None:
    """Mirrors `test_terminal_state_survives_active_run_teardown`: a noted terminal phase is
    still built after its run is gone, and a restarted publisher's next revision is higher.

    Port: the revision floor is one counter in the store, shared by every replica.
    """
    async with relay_env(store) as env:
        await env.pair()
        running(env, "session")
        await env.service.note_terminal("stream-session", "completed")
        env.host.end_run("stream-session")
        (state,) = await env.publisher.build_states("default")
        assert (state.session_id, state.phase) == ("session", "completed")
        assert await store.revision_floor() >= state.revision

        running(env, "later")
        async with restarted(env) as publisher:
            (later,) = await publisher.build_states("default")
        assert later.revision > state.revision


async def test_health_only_waiter_is_not_published(store: RelayStore) -> None:
    """Mirrors `test_health_only_waiter_is_not_published`: a run that only waits on health is
    left out of the snapshot."""
    async with relay_env(store) as env:
        await env.pair()
        running(env, "session")
        env.host.create_session("waiting")
        env.host.runs["admission"] = ActiveRun("admission", "waiting", START, health_only=True)
        built = await env.publisher.build_states("default")
        assert [state.session_id for state in built] == ["session"]


# ── failure handling ─────────────────────────────────────────────────────────


async def test_publisher_isolates_permanent_failure_to_one_profile(store: RelayStore) -> None:
    """Mirrors `test_publisher_isolates_permanent_failure_to_one_profile`: a 401 on one profile
    disables only that profile (tried once), logged without a traceback; the other goes on."""
    async with relay_env(store, profiles=("bad", "good")) as env:
        await env.pair("bad")
        await env.pair("good", user="usr_good")
        bad, good = await env.profile_id("bad"), await env.profile_id("good")
        before_bad, before_good = len(snapshots_to(env, bad)), len(snapshots_to(env, good))
        env.relay.inject("snapshot", 401)  # the first snapshot of a pass is `bad`'s
        assert await env.publish() is None
        assert await env.publish() is None
        assert [r.status for r in snapshots_to(env, bad)[before_bad:]] == [401]
        assert [r.status for r in snapshots_to(env, good)[before_good:]] == [200, 200]
        disabled = [
            line for line in env.logs if "disabled profile bad after permanent HTTP 401" in line
        ]
        assert len(disabled) == 1
        assert not any("Traceback" in line for line in env.logs)


async def test_publisher_attempts_every_profile_before_retryable_backoff(
    store: RelayStore,
) -> None:
    """Mirrors `test_publisher_attempts_every_profile_before_retryable_backoff`: a 429 on one
    profile still lets every other profile publish, then raises the 429 for backoff."""
    async with relay_env(store, profiles=("busy", "healthy")) as env:
        await env.pair("busy")
        await env.pair("healthy", user="usr_healthy")
        busy, healthy = await env.profile_id("busy"), await env.profile_id("healthy")
        running(env, "h1", profile="healthy")
        env.relay.inject("snapshot", 429)  # `busy` goes first
        with pytest.raises(RelayHttpError) as raised:
            await env.publisher.publish_snapshot(isolate_permanent=True)
        assert raised.value.status == 429
        assert snapshots_to(env, busy)[-1].status == 429
        assert snapshots_to(env, healthy)[-1].status == 200
        assert [row.session_id for row in env.relay.rows(PUBLISHER_ID, healthy)] == ["h1"]


async def test_publisher_retries_transient_failures_with_capped_backoff(
    store: RelayStore,
) -> None:
    """Mirrors `test_publisher_retries_transient_failures_with_capped_backoff`: with the jitter
    at 1.2, eight 503s back off 6, 12, 24, 48, 96, 192, 300, 300 s; `failed` is logged once,
    and `recovered` after the ninth attempt succeeds."""
    expected = [6, 12, 24, 48, 96, 192, 300, 300]
    jitter: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        jitter.append((low, high))
        return 1.2

    assert [backoff_delay(n, lambda _low, _high: 1.2) for n in range(1, 9)] == pytest.approx(
        expected
    )
    async with relay_env(store) as env:
        await env.pair()
        before = len(env.sent("snapshot"))
        env.logs.clear()
        env.relay.inject("snapshot", 503, times=8)
        service: RelayService = env.new_service(uniform=uniform)
        assert await service.start()
        publisher = service.current()
        assert publisher is not None
        waits = [await publisher.run_once() for _ in range(8)]
        assert waits == pytest.approx(expected)
        assert await publisher.run_once() is None
        await service.stop()

        assert len(env.sent("snapshot")) - before == 9
        assert set(jitter) == {(0.8, 1.2)}
        text = "\n".join(env.logs)
        assert text.count("Talaria relay snapshot failed") == 1
        assert text.count("Talaria relay snapshot still failing") == 7
        assert text.count("Talaria relay snapshot recovered") == 1
        assert "retrying in 6.0s" in env.logs[0]
        assert "retrying in 300.0s" in env.logs[7]
