"""Two replicas on one store: they share the registration, the counter and the ledger."""

from __future__ import annotations

from backends import REAL, on
from harness import PUBLISHER_ID, relay_env

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
        replica = env.new_service()
        await replica.start()
        publisher = replica.current()
        assert publisher is not None
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
        await replica.stop()


async def test_each_session_is_announced_once_across_replicas(store: RelayStore) -> None:
    """Both replicas observe the same new sessions; the relay hears of each exactly once."""
    async with relay_env(store) as env:
        await env.pair()
        replica = env.new_service()
        await replica.start()
        publisher = replica.current()
        assert publisher is not None
        for n in range(5):
            env.host.create_session(f"s{n}")
        await env.publish()
        await publisher.run_once()
        assert sorted(e.session_id for e in env.relay.started_events) == [f"s{n}" for n in range(5)]
        await replica.stop()
