"""Faults from the relay (spec §1.3, §1.5): what the publisher does, and that the store survives.

Retryable answers (408, 425, 429, 5xx), timeouts and network errors back off (logged `failed`,
`still failing`, then `recovered`) and keep views and started announcements for the next pass.
Permanent answers disable one profile's snapshots, drop a view, or mark an announcement sent.
After every fault the store must still hold what it held: the same registration, a revision
floor that only rises, every ledger entry and every deleted session not yet acknowledged. And no
secret reaches a log record, a logged line or an error message (the `no_secret_leaks` fixture).
"""

from __future__ import annotations

import time

import httpx
import pytest
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness import PUBLISHER_ID, RELAY_URL, Env, Wire, relay_env, restarted
from intact import PAST_LEASE_S, assert_intact, delete, finished, log_lines, running, stored

from relay.client import RelayClient
from relay.errors import RelayPairingError, RelayTimeoutError
from relay.protocol import b64url, compact, snapshot_path
from relay.store import RelayStore

# Each fault case also proves that no key, invitation or signature reached a log or an error.
pytestmark = [on(MEMORY), pytest.mark.usefixtures("no_secret_leaks")]

RETRYABLE = (408, 425, 429, 500, 502, 503, 504)
PERMANENT = (400, 403, 409)
TRANSPORT_ERRORS = (httpx.ReadTimeout, httpx.ConnectTimeout, httpx.ConnectError)


def fault(env: Env, wire: Wire, route: str, kind: int | type[httpx.TransportError]) -> None:
    """The next request to `route` gets status `kind` from the relay, or transport error `kind`."""
    if isinstance(kind, int):
        env.relay.inject(route, kind)
    else:
        wire.fail(route, kind)


# ── snapshots ────────────────────────────────────────────────────────────────


async def test_a_failing_snapshot_backs_off_and_logs_failed_still_failing_recovered(
    store: RelayStore,
) -> None:
    """Two 503s back off 5 s then 10 s with `failed` then `still failing`, a success logs
    `recovered`; every attempt drew higher revisions and the relay keeps the last one."""
    async with relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        before = await stored(store)
        env.logs.clear()
        env.relay.inject("snapshot", 503, times=2)
        assert await env.publish() == 5.0
        after_first = await assert_intact(store, before)
        assert after_first.floor > before.floor
        assert await env.publish() == 10.0
        after_second = await assert_intact(store, after_first)
        assert after_second.floor > after_first.floor
        assert await env.publish() is None
        after = await assert_intact(store, after_second)

        assert env.logs == [
            "[relay] Talaria relay snapshot failed for profile default "
            "(Talaria relay returned HTTP 503); "
            "retrying in 5.0s",
            "[relay] Talaria relay snapshot still failing for profile default "
            "(Talaria relay returned HTTP 503); "
            "retrying in 10.0s",
            "[relay] Talaria relay snapshot recovered",
        ]
        revisions = [r.json()["states"][0]["revision"] for r in env.sent("snapshot")[-3:]]
        assert revisions == sorted(set(revisions))
        (row,) = env.relay.rows(PUBLISHER_ID, await env.profile_id())
        assert row.revision == revisions[-1] == after.floor


@pytest.mark.parametrize("status", RETRYABLE)
async def test_every_retryable_status_backs_off_without_disabling_the_profile(
    store: RelayStore, status: int
) -> None:
    """A snapshot answered 408, 425, 429 or 5xx backs off and the profile publishes next pass."""
    async with relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        before = await stored(store)
        env.relay.inject("snapshot", status)
        assert await env.publish() == 5.0
        assert log_lines(
            env, f"snapshot failed for profile default (Talaria relay returned HTTP {status})"
        )
        await assert_intact(store, before)
        assert await env.publish() is None
        assert [row.session_id for row in env.relay.rows(PUBLISHER_ID, await env.profile_id())] == [
            "s1"
        ]
        assert not log_lines(env, "disabled profile")


@pytest.mark.parametrize("error", TRANSPORT_ERRORS)
async def test_a_snapshot_without_an_answer_backs_off(
    store: RelayStore, error: type[httpx.TransportError]
) -> None:
    """A timeout or network error on a snapshot backs off as `Could not reach Talaria Relay`."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        running(env, "s1")
        before = await stored(store)
        wire.fail("snapshot", error)
        assert await env.publish() == 5.0
        assert log_lines(
            env,
            "snapshot failed for profile default (Could not reach Talaria Relay: injected failure)",
        )
        await assert_intact(store, before)
        assert await env.publish() is None
        assert log_lines(env, "snapshot recovered")


async def test_a_relay_slower_than_the_client_timeout_times_out_and_backs_off(
    store: RelayStore,
) -> None:
    """A relay that answers after the client timeout fails the request within that timeout
    (`RelayTimeoutError`) and the publisher backs off, then recovers."""
    async with relay_env(store) as env:
        await env.pair()
        config = await env.config()
        client = RelayClient(RELAY_URL, http=env.http, clock=env.clock, timeout=0.1)
        env.relay.inject("snapshot", 200, delay=0.4)
        began = time.monotonic()
        with pytest.raises(RelayTimeoutError, match="Could not reach Talaria Relay"):
            await client.put(
                snapshot_path(PUBLISHER_ID, config.profiles["default"].profile_id),
                compact({"snapshotId": "slow", "states": []}),
                key=Ed25519PrivateKey.generate(),
                key_id=config.key_id,
            )
        assert time.monotonic() - began < 0.4

        publisher = await env.publisher_with(client, "impatient")
        running(env, "s1")
        before = await stored(store)
        env.relay.inject("snapshot", 200, delay=0.4)
        began = time.monotonic()
        assert await publisher.run_once() == 5.0
        assert time.monotonic() - began < 0.4
        assert log_lines(
            env, "snapshot failed for profile default (Could not reach Talaria Relay: TimeoutError)"
        )
        await assert_intact(store, before)
        assert await publisher.run_once() is None
        await publisher.stop()


async def revoke_our_key(env: Env) -> None:
    """The owner registers the publisher again elsewhere; that key's first publish revokes ours."""
    key = Ed25519PrivateKey.generate()
    client = RelayClient(RELAY_URL, http=env.http, clock=env.clock)
    request = {
        "invitation": env.relay.mint_invitation("usr_owner"),
        "publisherId": PUBLISHER_ID,
        "profileId": "prf_elsewhere",
        "label": "Elsewhere",
        "publicKey": b64url(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)),
    }
    reply = await client.post("/v1/pairings/publisher/redeem", compact(request))
    body = compact({"snapshotId": "elsewhere", "states": []})
    path = snapshot_path(PUBLISHER_ID, reply["profileId"])
    await client.put(path, body, key=key, key_id=reply["keyId"])


async def test_a_revoked_key_gets_401_and_disables_the_profile(store: RelayStore) -> None:
    """A snapshot signed with a key the relay revoked gets 401: the profile is disabled (logged,
    no backoff) and nothing more is sent for it, while the store keeps every entry."""
    async with relay_env(store) as env:
        await env.pair()
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("s-new")
        running(env, "s1")
        await revoke_our_key(env)
        ours = (await env.config()).key_id
        assert [k["revoked"] for k in env.relay.state()["keys"] if k["keyId"] == ours] == [True]
        before = await stored(store)
        sent = len(env.relay.requests)

        assert await env.publish() is None
        assert [r.status for r in env.relay.requests[sent:]] == [401]
        assert len(log_lines(env, "disabled profile default after permanent HTTP 401")) == 1
        await env.service.mark_viewed("s1")
        assert await env.publish() is None
        assert len(env.relay.requests) == sent + 1
        await assert_intact(store, before)


async def test_a_permanent_error_disables_only_that_profile_and_loses_nothing(
    store: RelayStore,
) -> None:
    """A 403 disables one profile while the other keeps publishing snapshots and announcements;
    after a restart the disabled profile publishes again and announces what started meanwhile."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        await env.pair("work", user="usr_work")
        default, work = await env.profile_id(), await env.profile_id("work")
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("d-new", profile="default")
        env.host.create_session("w-new", profile="work")
        before = await stored(store)
        env.relay.inject("snapshot", 403)  # `default` goes first
        assert await env.publish() is None
        assert await env.publish() is None
        assert len(log_lines(env, "disabled profile default after permanent HTTP 403")) == 1
        assert [(e.profile_id, e.session_id) for e in env.relay.started_events] == [(work, "w-new")]
        await assert_intact(store, before)

        async with restarted(env) as publisher:
            assert await publisher.run_once() is None
        assert {(e.profile_id, e.session_id) for e in env.relay.started_events} == {
            (default, "d-new"),
            (work, "w-new"),
        }


# ── viewed acknowledgements and the deleted outbox ───────────────────────────


@pytest.mark.parametrize("kind", [503, 429, httpx.ReadTimeout, httpx.ConnectError])
async def test_a_retryable_viewed_failure_keeps_the_view_queued(
    store: RelayStore, kind: int | type[httpx.TransportError]
) -> None:
    """A viewed acknowledgement that fails retryably backs off and stays queued; the next pass
    sends it and the relay acknowledges the completion."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        await finished(env, "s1")
        await env.service.mark_viewed("s1")
        before = await stored(store)
        fault(env, wire, "viewed", kind)
        assert await env.publish() == 5.0
        assert "s1" in env.publisher.views
        assert env.relay.viewed == []
        await assert_intact(store, before)
        assert await env.publish() is None
        assert env.publisher.views == {}
        assert [ack.session_id for ack in env.relay.viewed] == ["s1"]
        (completion,) = env.relay.completions(PUBLISHER_ID, await env.profile_id())
        assert completion.acknowledged


@pytest.mark.parametrize("status", PERMANENT)
async def test_a_permanently_rejected_view_is_dropped_and_logged(
    store: RelayStore, status: int
) -> None:
    """A viewed acknowledgement answered 400, 403 or 409 is dropped without backoff and logged."""
    async with relay_env(store) as env:
        await env.pair()
        await finished(env, "s1")
        await env.service.mark_viewed("s1")
        before = await stored(store)
        env.relay.inject("viewed", status)
        assert await env.publish() is None
        assert env.publisher.views == {}
        assert log_lines(
            env, f"rejected a viewed acknowledgement for profile default (HTTP {status})"
        )
        assert await env.publish() is None
        assert len(env.sent("viewed")) == 1
        await assert_intact(store, before)


async def test_an_old_relay_without_viewed_is_logged_once(store: RelayStore) -> None:
    """A relay answering 404 on viewed (an older relay) drops each view, logged only once."""
    async with relay_env(store) as env:
        await env.pair()
        env.relay.unsupported.add("viewed")
        for session_id in ("s1", "s2"):
            await finished(env, session_id)
            await env.service.mark_viewed(session_id)
            assert await env.publish() is None
        assert [r.status for r in env.sent("viewed")] == [404, 404]
        assert env.publisher.views == {}
        assert len(log_lines(env, "does not support viewed acknowledgements")) == 1


async def test_a_deleted_session_stays_queued_until_the_relay_acknowledges_it(
    store: RelayStore,
) -> None:
    """A deleted session's acknowledgement survives a 503, a restart and a network error, and
    leaves the outbox only once the relay accepted it."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        view = await delete(env, "gone")
        before = await stored(store)
        env.relay.inject("viewed", 503)
        assert await env.publish() == 5.0
        await assert_intact(store, before)

        # A restarted process is a new owner: the deletion is its own once the old claim ends.
        env.clock.advance(PAST_LEASE_S)
        async with restarted(env) as publisher:
            wire.fail("viewed", httpx.ConnectError)
            assert await publisher.run_once() == 5.0
            await assert_intact(store, before)
            assert await publisher.run_once() is None
        await assert_intact(store, before, acked=("gone",))
        assert await store.pending_deleted() == []
        assert [(ack.session_id, ack.through) for ack in env.relay.viewed] == [
            ("gone", view.through)
        ]
        (completion,) = env.relay.completions(PUBLISHER_ID, await env.profile_id())
        assert completion.acknowledged


@pytest.mark.parametrize("status", [404, *PERMANENT])
async def test_a_permanently_rejected_deletion_is_dropped(store: RelayStore, status: int) -> None:
    """Spec §1.3 (viewed: a permanent error drops the view): a deleted session's acknowledgement
    that the relay permanently refuses leaves the outbox instead of being resent every pass."""
    async with relay_env(store) as env:
        await env.pair()
        await delete(env, "gone")
        if status == 404:
            env.relay.unsupported.add("viewed")
        else:
            env.relay.inject("viewed", status)
        assert await env.publish() is None
        assert await env.publish() is None
        assert [r.status for r in env.sent("viewed")] == [status]
        assert await store.pending_deleted() == []


# ── session-started announcements ────────────────────────────────────────────


@pytest.mark.parametrize("kind", [503, 429, httpx.ReadTimeout, httpx.ConnectError])
async def test_a_retryable_started_failure_keeps_the_entry_unsent(
    store: RelayStore, kind: int | type[httpx.TransportError]
) -> None:
    """An announcement that fails retryably backs off and stays unsent (the snapshot of that pass
    still went out); the next pass sends it under the same eventId."""
    async with relay_env(store) as env:
        wire = env.wire
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        running(env, "s-new")
        before = await stored(store)
        fault(env, wire, "started", kind)
        assert await env.publish() == 5.0
        assert [row.session_id for row in env.relay.rows(PUBLISHER_ID, scope)] == ["s-new"]
        after = await assert_intact(store, before)
        assert after.ledger[(scope, "s-new")].sent is False
        assert env.relay.started_events == []

        assert await env.publish() is None
        assert [e.event_id for e in env.relay.started_events] == ["started:s-new"]
        assert (await assert_intact(store, after)).ledger[(scope, "s-new")].sent


@pytest.mark.parametrize("status", PERMANENT)
async def test_a_permanently_rejected_announcement_is_marked_sent_and_logged(
    store: RelayStore, status: int
) -> None:
    """An announcement answered 400, 403 or 409 is logged, marked sent and never resent."""
    async with relay_env(store) as env:
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("s-new")
        before = await stored(store)
        env.relay.inject("started", status)
        assert await env.publish() is None
        assert await env.publish() is None
        assert [r.status for r in env.sent("started")] == [status]
        assert log_lines(
            env, f"rejected a session-started event for profile default (HTTP {status})"
        )
        after = await assert_intact(store, before)
        assert after.ledger[(scope, "s-new")].sent


async def test_a_failed_announcement_waits_for_its_lease_on_another_replica(
    store: RelayStore,
) -> None:
    """Port (started claims with leases): an entry left unsent by a failure stays claimed by its
    replica, so another replica resends it only after the lease, and exactly once."""
    async with relay_env(store) as env:
        await env.pair()
        scope = await env.profile_id()
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("s-new")
        env.relay.inject("started", 503)
        assert await env.publish() == 5.0
        async with restarted(env) as replica:
            assert await replica.run_once() is None
            assert len(env.sent("started")) == 1
            env.clock.advance(PAST_LEASE_S)
            assert await replica.run_once() is None
        assert [r.status for r in env.sent("started")] == [503, 200]
        (entry,) = [e for e in (await stored(store)).ledger.values() if e.profile_id == scope]
        assert entry.sent


# ── pairing ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        (503, 502, r"rejected server registration \(HTTP 503\)"),
        (429, 409, r"rejected server registration \(HTTP 429\)"),
        (400, 409, r"rejected server registration \(HTTP 400\)"),
        (httpx.ConnectError, 502, "Could not reach Talaria Relay"),
        (httpx.ReadTimeout, 502, "Could not reach Talaria Relay"),
    ],
)
async def test_a_failed_registration_saves_nothing(
    store: RelayStore, kind: int | type[httpx.TransportError], status: int, message: str
) -> None:
    """A registration the relay refuses or never answers fails with 409 (4xx) or 502 and leaves
    no registration and no publisher; registering again then works."""
    async with relay_env(store) as env:
        wire = env.wire
        fault(env, wire, "publisher_redeem", kind)
        with pytest.raises(RelayPairingError, match=message) as raised:
            await env.pair()
        assert raised.value.status == status
        assert await store.load_config() is None
        assert env.service.current() is None
        assert env.relay.keys() == []
        assert (await env.pair())["ok"] is True


@pytest.mark.parametrize(
    ("kind", "status"),
    [(503, 502), (401, 409), (httpx.ConnectError, 502), (httpx.ReadTimeout, 502)],
)
async def test_a_failed_enrollment_leaves_the_registration_unchanged(
    store: RelayStore, kind: int | type[httpx.TransportError], status: int
) -> None:
    """An enrollment the relay refuses or never answers leaves the registration, the publisher
    and the store as they were; enrolling again then works."""
    async with relay_env(store, profiles=("default", "work")) as env:
        wire = env.wire
        await env.pair()
        publisher = env.publisher
        before = await stored(store)
        fault(env, wire, "profile_redeem", kind)
        with pytest.raises(RelayPairingError) as raised:
            await env.pair("work", user="usr_work", operator=False)
        assert raised.value.status == status
        await assert_intact(store, before)
        assert env.publisher is publisher
        assert (await env.pair("work", user="usr_work", operator=False))["ok"] is True
        assert set((await env.config()).profiles) == {"default", "work"}


async def test_a_failed_validation_snapshot_keeps_the_registration_and_publisher(
    store: RelayStore,
) -> None:
    """A 503 on the validation snapshot of a re-enrollment fails with 502, keeps the saved
    registration equal and the running publisher in place (TS `surfaces relay rejections as
    409/502 without persisting a broken registration`)."""
    async with relay_env(store) as env:
        await env.pair()
        publisher = env.publisher
        before = await env.config()
        env.relay.inject("snapshot", 503)
        with pytest.raises(RelayPairingError, match="initial Talaria Relay snapshot") as raised:
            await env.pair(operator=False)
        assert raised.value.status == 502
        assert await env.config() == before
        assert env.publisher is publisher
        running(env, "s1")
        assert await env.publish() is None
