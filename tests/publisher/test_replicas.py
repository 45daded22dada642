"""Two replicas on one store: they share the registration, the counter and the ledger."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from backends import REAL, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env, restarted

from relay.protocol import b64url, compact, snapshot_path
from relay.store import RelayStore

pytestmark = on(*REAL)


async def test_a_replica_follows_an_enrollment_made_on_another(store: RelayStore) -> None:
    """Replica B publishes a profile that replica A enrolled, from its next pass on."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        replica = env.new_service()
        assert await replica.start()
        await env.pair("work", user="usr_work", operator=False)
        work_id = (await env.config()).profiles["work"].profile_id
        env.host.create_session("w1", "work", "Work chat")
        env.host.start_run("w1")
        published = len(env.relay.rows(PUBLISHER_ID, work_id))
        publisher = replica.current()
        assert publisher is not None
        assert await publisher.run_once() is None
        assert len(env.relay.rows(PUBLISHER_ID, work_id)) == published + 1
        await replica.stop()


async def test_replicas_draw_revisions_from_one_counter(store: RelayStore) -> None:
    """Snapshots of two replicas never reuse a revision, so the relay drops none as stale."""
    async with relay_env(store) as env:
        await env.pair()
        async with restarted(env) as publisher:
            env.host.create_session("s1")
            env.host.start_run("s1")
            for _ in range(3):
                await env.publish()
                await publisher.run_once()
            revisions = [
                state["revision"]
                for request in env.accepted("snapshot")
                for state in request.json()["states"]
            ]
            assert len(revisions) == 6
            assert revisions == sorted(set(revisions))


async def test_each_session_is_announced_once_across_replicas(store: RelayStore) -> None:
    """Both replicas observe the same new sessions; the relay hears of each exactly once."""
    async with relay_env(store) as env:
        await env.pair()
        async with restarted(env) as publisher:
            for n in range(5):
                env.host.create_session(f"s{n}")
            await env.publish()
            await publisher.run_once()
            announced = sorted(e.session_id for e in env.relay.started_events)
            assert announced == [f"s{n}" for n in range(5)]


async def reregister(env: Env) -> str:
    """What another replica's re-registration leaves: a new key on the relay and in the store."""
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    request = {
        "invitation": env.relay.mint_invitation("usr_owner"),
        "publisherId": PUBLISHER_ID,
        "profileId": await env.profile_id(),
        "label": "Talaria Web",
        "publicKey": b64url(public),
    }
    answer = await env.http.post(
        f"{RELAY_URL}/v1/pairings/publisher/redeem", content=compact(request)
    )
    key_id = str(answer.json()["keyId"])
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    config = await env.config()
    ref = await env.store.save_key(key_id, pem)
    rotated = replace(config, key_id=key_id, key_ref=ref)
    await env.store.save_config(rotated, expected_generation=config.generation)
    return key_id


async def test_a_key_rotated_on_another_replica_is_reloaded_not_refused(store: RelayStore) -> None:
    """Another replica re-registers (a new key; its first publication revokes the old one):
    this replica's next snapshot under the old key gets a 401, reloads the registration and
    publishes under the new key, disabling nothing."""
    async with relay_env(store) as env:
        await env.pair()
        async with restarted(env) as publisher:
            env.host.create_session("s1")
            env.host.start_run("s1")
            new_key = await reregister(env)
            assert await env.publish() is None  # the new key's first publication revokes the old
            refused = len([r for r in env.sent("snapshot") if r.status == 401])
            await publisher.publish_snapshot(isolate_permanent=True)
            assert len([r for r in env.sent("snapshot") if r.status == 401]) == refused + 1
            assert publisher.config.key_id == new_key
            assert env.sent("snapshot")[-1].status == 200
            assert await publisher.run_once() is None
            assert not [line for line in env.logs if "disabled" in line or "stopped" in line]


async def test_refusals_side_by_side_after_a_rotation_adopt_the_new_key_once(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica re-registers: this replica's three snapshot PUTs, in flight together
    under the old key, are all refused (401); the new key is read from the store once, and
    every profile is sent again under it, none disabled."""
    profiles = ("default", "home", "work")
    async with relay_env(store, profiles=profiles) as env:
        await env.pair()
        for profile in profiles[1:]:
            await env.pair(profile, user=f"usr_{profile}")
        async with restarted(env) as publisher:
            new_key = await reregister(env)
            assert await env.publish() is None  # the new key's first publication revokes the old
            config = await env.config()
            paths = [snapshot_path(PUBLISHER_ID, g.profile_id) for g in config.profiles.values()]
            loaded: list[str] = []
            load_key = env.store.load_key

            async def counted(ref: str) -> str:
                loaded.append(ref)
                return await load_key(ref)

            monkeypatch.setattr(env.store, "load_key", counted)
            mark = len(env.relay.requests)
            stall = env.wire.stall("snapshot")
            publishing = asyncio.create_task(publisher.publish_snapshot(isolate_permanent=True))
            await stall.until(lambda s: len(s.held) == len(paths))
            stall.release()
            await publishing
            sent = [(r.path, r.status) for r in env.relay.requests[mark:] if r.route == "snapshot"]
            assert sorted(sent) == sorted([(p, 401) for p in paths] + [(p, 200) for p in paths])
            assert (publisher.config.key_id, loaded) == (new_key, [config.key_ref])
            assert not [line for line in env.logs if "disabled" in line or "stopped" in line]
