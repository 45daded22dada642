"""What docs/pairing.md says of grants holds: one grant per relay user and server, and the
recovery of a disabled profile (issue 31)."""

from __future__ import annotations

from backends import MEMORY, on
from harness import PUBLISHER_ID, relay_env

from relay.store import RelayStore

pytestmark = on(MEMORY)


async def test_a_second_profile_of_the_same_relay_user_disables_the_first_until_reenrolled(
    store: RelayStore,
) -> None:
    """Enrolling `work` with the same relay user's invitation moves that user's grant: the relay
    answers `default`'s snapshots 409 and the publisher disables it, `work` goes on; enrolling
    `default` again with another relay user's invitation makes it publish again."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair("default", user="usr_owner")
        await env.pair("work", user="usr_owner")  # the mistake the page warns of
        for profile in ("default", "work"):
            env.host.create_session(f"chat-{profile}", profile)
            env.host.start_run(f"chat-{profile}", f"stream-{profile}")
        await env.publish()
        default_id, work_id = await env.profile_id("default"), await env.profile_id("work")
        assert default_id in env.publisher.disabled
        assert "HTTP 409" in env.publisher.disabled[default_id]
        assert work_id not in env.publisher.disabled
        assert [r.session_id for r in env.relay.rows(PUBLISHER_ID, work_id)] == ["chat-work"]

        await env.pair("default", user="usr_default")  # the recovery
        await env.publish()
        assert default_id not in env.publisher.disabled
        rows = env.relay.rows(PUBLISHER_ID, await env.profile_id("default"))
        assert [r.session_id for r in rows] == ["chat-default"]
