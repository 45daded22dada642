"""Session-started announcements: `relay-started.test.ts` (spec §6.2, §4.7) on the memory store.

The port keeps the started ledger in the store and lets many replicas drain it: each pass claims
unsent entries for `DEFAULT_LEASE_S` under the service's claim owner. A retryable failure leaves
the claim in place, so a restarted service (a new owner) resends only once that lease has ended;
the tests move the clock past it where upstream simply restarts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env, restarted

from relay.client import RelayClient
from relay.host import AgentSessionRow
from relay.protocol import b64url, compact
from relay.publishing.leases import DEFAULT_LEASE_S
from relay.store import ProfileGrant, RelayConfig, RelayStore, StartedEntry
from relay.testing.clock import START

pytestmark = on(MEMORY)

ENCODED_PUBLISHER = "https%3A%2F%2Fhermes.example"
PAST_LEASE_S = DEFAULT_LEASE_S + 1


async def ledger(store: RelayStore, scope: str) -> dict[str, StartedEntry]:
    """The scope's ledger entries by session id."""
    for ledger_scope in await store.started_ledger():
        if ledger_scope.profile_id == scope:
            return {entry.session_id: entry for entry in ledger_scope.entries}
    raise AssertionError(f"no started ledger for {scope}")


def started_path(scope: str, session_id: str) -> str:
    return f"/v1/publishers/{ENCODED_PUBLISHER}/profiles/{scope}/sessions/{session_id}/started"


def started_event(scope: str, session_id: str, started_at_s: float) -> dict[str, Any]:
    return {
        "version": 1,
        "eventId": f"started:{session_id}",
        "publisherId": PUBLISHER_ID,
        "profileId": scope,
        "sessionId": session_id,
        "startedAt": int(started_at_s * 1000),
    }


def announced(env: Env) -> list[str]:
    """Session ids of the started events the relay accepted, in the order it received them."""
    return [event.session_id for event in env.relay.started_events]


async def test_announces_each_new_web_and_agent_session_once(store: RelayStore) -> None:
    """Mirrors `announces each new Web and Agent-discovered session once, never the sessions that
    existed before`: only messageful Web sessions and Agent lineage roots that started after
    tracking began are announced, once each, across later turns, compression and a restart."""
    async with relay_env(store) as env:
        env.host.create_session("web-old").created_at = START - 5
        env.host.add_agent_session("default", "cli-old", START - 5)
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        assert env.sent("started") == []

        env.clock.advance(10)
        now = env.clock.now
        env.host.create_session("web-new").created_at = now - 2
        env.host.create_session("web-hidden", messages=0).created_at = now - 1
        env.host.add_agent_session("default", "cli-new", now - 1)
        assert await env.publish() is None
        assert [(r.path, r.json()) for r in env.sent("started")] == [
            (started_path(scope, "web-new"), started_event(scope, "web-new", now - 2)),
            (started_path(scope, "cli-new"), started_event(scope, "cli-new", now - 1)),
        ]

        # Later turns, a compressed Agent chat's new segment and a restart see the same sessions.
        env.host.sessions["web-new"].message_count = 9
        env.host.agent_rows["default"][1] = AgentSessionRow("cli-new-segment-2", now - 1, "cli-new")
        assert await env.publish() is None
        async with restarted(env) as publisher:
            assert await publisher.run_once() is None
        assert len(env.sent("started")) == 2
        assert announced(env) == ["web-new", "cli-new"]
        entries = await ledger(store, scope)
        assert set(entries) == {"web-new", "cli-new"}
        assert all(entry.sent for entry in entries.values())


async def test_sends_each_session_only_to_its_own_profiles_scope(store: RelayStore) -> None:
    """Mirrors `sends each session only to the relay scope of the profile that owns it`: Web and
    Agent sessions go to the scope of the profile that owns them and to no other.

    Port: entries that started in the same millisecond go out in session-id order (the store's
    tie-break), where upstream keeps discovery order; the relay gives the order no meaning.
    """
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        await env.pair("work", user="usr_work")
        default, work = await env.profile_id(), await env.profile_id("work")
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("web-a", profile="default")
        env.host.create_session("web-b", profile="work")
        env.host.add_agent_session("work", "cli-b", env.clock.now)
        assert await env.publish() is None

        sent = [(r.path, r.json()["profileId"]) for r in env.sent("started")]
        assert sent[0] == (started_path(default, "web-a"), default)
        assert sorted(sent[1:]) == [
            (started_path(work, "cli-b"), work),
            (started_path(work, "web-b"), work),
        ]
        assert {(e.profile_id, e.session_id) for e in env.relay.started_events} == {
            (default, "web-a"),
            (work, "web-b"),
            (work, "cli-b"),
        }
        assert set(await ledger(store, default)) == {"web-a"}
        assert set(await ledger(store, work)) == {"web-b", "cli-b"}


async def test_retries_a_failed_or_interrupted_event_under_the_same_event_id(
    store: RelayStore,
) -> None:
    """Mirrors `retries a failed or interrupted event under the same event ID after a restart`:
    after a 503 and then a network error the event is resent under the same eventId until the
    relay takes it, and is then never sent again.

    Port: the 503 leaves the entry claimed; a restarted service resends it only after that claim's
    lease has ended, never while another owner may still be sending it.
    """
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("web-new")

        env.relay.inject("started", 503)
        assert await env.publish() is not None
        assert "HTTP 503" in env.logs[-1]
        entry = (await ledger(store, scope))["web-new"]
        assert (entry.sent, entry.claimed_by is not None) == (False, True)

        async with restarted(env) as publisher:
            assert await publisher.run_once() is None  # still leased to the first process
            assert len(wire.bodies("started")) == 1
            env.clock.advance(PAST_LEASE_S)
            wire.fail("started", httpx.ConnectError)
            assert await publisher.run_once() is not None
            assert "Could not reach Talaria Relay" in env.logs[-1]
        assert not (await ledger(store, scope))["web-new"].sent

        env.clock.advance(PAST_LEASE_S)
        async with restarted(env) as publisher:
            assert await publisher.run_once() is None
            assert await publisher.run_once() is None
        assert [body["eventId"] for body in wire.bodies("started")] == ["started:web-new"] * 3
        assert [event.event_id for event in env.relay.started_events] == ["started:web-new"]
        assert (await ledger(store, scope))["web-new"].sent


async def test_drops_an_event_the_relay_permanently_rejects(store: RelayStore) -> None:
    """Mirrors `drops an event the relay permanently rejects instead of retrying it forever`: a
    404 from a relay without the route marks the event sent, without backoff, logged once."""
    async with relay_env(store) as env:
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("web-new")
        env.relay.unsupported.add("started")
        assert await env.publish() is None
        assert await env.publish() is None
        assert [r.status for r in env.sent("started")] == [404]
        assert (await ledger(store, scope))["web-new"].sent

        env.clock.advance(10)
        env.host.create_session("web-next")
        assert await env.publish() is None
        assert [r.status for r in env.sent("started")] == [404, 404]
        unsupported = [line for line in env.logs if "does not support session-started" in line]
        assert len(unsupported) == 1
        assert all(entry.sent for entry in (await ledger(store, scope)).values())


async def test_keeps_observing_new_sessions_while_the_relay_is_slow(store: RelayStore) -> None:
    """Mirrors `keeps observing new sessions while the relay is slow`: a stalled announcement
    holds only the publisher (not the store), and a session that starts meanwhile goes out next."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        gate = wire.hold("started")
        env.host.create_session("web-1")
        slow = asyncio.create_task(env.publish())
        await asyncio.wait_for(wire.held.wait(), 1)

        env.host.create_session("web-2")
        env.service.changed()
        entries = await asyncio.wait_for(ledger(store, scope), 1)  # the store is not locked
        assert (entries["web-1"].sent, entries["web-1"].claimed_by is not None) == (False, True)
        gate.set()
        assert await slow is None
        assert await env.publish() is None
        assert [body["sessionId"] for body in wire.bodies("started")] == ["web-1", "web-2"]
        assert announced(env) == ["web-1", "web-2"]


async def test_another_replica_keeps_announcing_while_one_is_stalled(store: RelayStore) -> None:
    """Port (started claims for many replicas): while one replica's announcement hangs, another
    replica on the same store observes and announces a new session, and leaves the claimed one."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        assert await env.publish() is None
        env.clock.advance(10)
        gate = wire.hold("started")
        env.host.create_session("web-1")
        slow = asyncio.create_task(env.publish())
        await asyncio.wait_for(wire.held.wait(), 1)

        env.host.create_session("web-2")
        async with restarted(env) as replica:
            assert await asyncio.wait_for(replica.run_once(), 1) is None
        assert announced(env) == ["web-2"]
        gate.set()
        assert await slow is None
        assert await env.publish() is None
        assert sorted(body["sessionId"] for body in wire.bodies("started")) == ["web-1", "web-2"]
        assert sorted(announced(env)) == ["web-1", "web-2"]


async def register_without_a_ledger(env: Env) -> None:
    """A registration saved by a version without session-started events: no ledger yet."""
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    client = RelayClient(RELAY_URL, http=env.http, clock=env.clock)
    request = {
        "invitation": env.relay.mint_invitation("usr_owner"),
        "publisherId": PUBLISHER_ID,
        "profileId": "prf_upgraded",
        "label": "Talaria Web",
        "publicKey": b64url(raw),
    }
    reply = await client.post("/v1/pairings/publisher/redeem", compact(request))
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    key_ref = await env.store.save_key(reply["keyId"], pem)
    identity = await env.store.profile_identity("default")
    grants = {"default": ProfileGrant(identity, reply["profileId"])}
    await env.store.save_config(
        RelayConfig(RELAY_URL, reply["publisherId"], reply["keyId"], key_ref, grants)
    )


async def test_announces_the_chat_that_wakes_the_first_pass_after_an_upgrade(
    store: RelayStore,
) -> None:
    """Mirrors `announces the chat whose change wakes the first pass after an upgrade`: tracking
    starts when the publisher starts, so a chat begun before its first pass is announced."""
    async with relay_env(store) as env:
        env.host.create_session("web-before-upgrade").created_at = START - 1
        await register_without_a_ledger(env)
        assert await store.started_ledger() == []
        assert await env.service.start()
        (scope,) = await store.started_ledger()
        assert (scope.profile_id, scope.floor) == ("prf_upgraded", int(START * 1000))

        env.clock.advance(1)
        env.host.create_session("web-first")
        env.clock.advance(1)
        env.service.changed()
        assert await env.publish() is None
        assert [r.json()["sessionId"] for r in env.sent("started")] == ["web-first"]
        assert announced(env) == ["web-first"]
