"""A service that stops hands its finished rows over at once: a restart (a new incarnation)
owns them on its first pass, and `status` no longer shows the stopped one as alive."""

from __future__ import annotations

from backends import MEMORY, on
from harness import relay_env

from relay.operator.facts import gather
from relay.store import RelayStore

pytestmark = on(MEMORY)


async def test_a_restart_owns_the_stopped_services_finished_rows_on_its_first_pass(
    store: RelayStore,
) -> None:
    """The first service publishes a finished turn and stops; the second's first pass owns its
    row, and the replicas `status` lists are the second alone, alive."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("chat-1", "default", "Plan")
        env.host.start_run("chat-1", "stream-1")
        assert await env.publish() is None
        await env.service.note_terminal("stream-1", "completed")
        env.host.end_run("stream-1")
        assert await env.publish() is None
        first = env.service.owner
        await env.service.stop()

        env.service = env.new_service()
        assert await env.service.start()
        assert await env.publish() is None
        rows = await store.run_states()
        assert {row.owner for row in rows} == {env.service.owner} != {first}
        now_ms = int(env.clock() * 1000)
        listed = (await gather(store, now_ms))["fleet"]["replicas"]
        # The stopped one is listed an hour longer, not alive, holding nothing.
        assert [(r["owner"], r["alive"]) for r in listed if r["runs"]] == [
            (env.service.owner, True)
        ]
        assert [r["alive"] for r in listed if r["owner"] == first] in ([], [False])
