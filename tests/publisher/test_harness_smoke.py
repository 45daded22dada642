"""The harness itself: register, publish, and the relay holds the row (on every backend)."""

from __future__ import annotations

from harness import PUBLISHER_ID, relay_env

from relay.store import RelayStore


async def test_register_and_publish_a_running_session(store: RelayStore) -> None:
    """A registered server publishes a running session that the dev relay accepts and stores."""
    async with relay_env(store) as env:
        assert await env.pair() == {"ok": True, "publisher_id": PUBLISHER_ID}
        env.host.create_session("s1", title="First")
        env.host.start_run("s1")
        assert await env.publish() is None
        profile_id = (await env.config()).profiles["default"].profile_id
        (row,) = env.relay.rows(PUBLISHER_ID, profile_id)
        assert (row.session_id, row.phase, row.title) == ("s1", "running", "First")
