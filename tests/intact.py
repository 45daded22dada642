"""What a fault must leave alone: the store's relay state, compared before and after.

After any fault the store must still hold what it held: the same registration, a revision floor
that only rises, every ledger entry (a sent one stays sent) and every deleted session not yet
acknowledged. Also the small steps fault tests share: a running or finished session, a deletion.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from harness import PUBLISHER_ID, Env

from relay.publishing.leases import DEFAULT_LEASE_S
from relay.store import DeletedView, RelayConfig, RelayStore, StartedEntry

PAST_LEASE_S = DEFAULT_LEASE_S + 1


@dataclass(frozen=True)
class Stored:
    """What the store holds, to compare before and after a fault."""

    config: RelayConfig
    generation: int
    floor: int
    floors: dict[str, int]
    ledger: dict[tuple[str, str], StartedEntry]
    deleted: dict[str, DeletedView]


async def stored(store: RelayStore) -> Stored:
    config = await store.load_config()
    assert config is not None
    scopes = await store.started_ledger()
    return Stored(
        config,
        config.generation,
        await store.revision_floor(),
        {scope.profile_id: scope.floor for scope in scopes},
        {(e.profile_id, e.session_id): e for scope in scopes for e in scope.entries},
        {view.id: view for view in await store.pending_deleted()},
    )


async def assert_intact(
    store: RelayStore, before: Stored, *, acked: tuple[str, ...] = ()
) -> Stored:
    """Nothing lost or rewritten: same registration, rising floor, ledger and outbox kept."""
    after = await stored(store)
    assert (after.config, after.generation) == (before.config, before.generation)
    assert after.floor >= before.floor
    assert all(after.floors.get(scope) == floor for scope, floor in before.floors.items())
    for key, entry in before.ledger.items():
        assert key in after.ledger, f"started entry {key} was lost"
        assert after.ledger[key].started_at == entry.started_at
        assert after.ledger[key].sent or not entry.sent, f"started entry {key} became unsent"
    for view_id, view in before.deleted.items():
        if view.session_id not in acked:
            assert after.deleted.get(view_id) == view, f"deleted {view.session_id} was lost"
    return after


def running(env: Env, session_id: str, profile: str = "default") -> None:
    env.host.create_session(session_id, profile=profile)
    env.host.start_run(session_id)


async def finished(env: Env, session_id: str, profile: str = "default") -> None:
    """A run that completed and whose outcome the relay holds."""
    running(env, session_id, profile)
    await env.service.note_terminal(f"stream-{session_id}", "completed")
    env.host.end_run(f"stream-{session_id}")
    assert await env.publish() is None


async def delete(env: Env, session_id: str) -> DeletedView:
    """Delete a session whose completion the relay holds; its acknowledgement is queued."""
    await finished(env, session_id)
    env.host.delete_session(session_id)
    await env.service.clear_deleted(session_id, "default")
    (view,) = [v for v in await env.store.pending_deleted() if v.session_id == session_id]
    return view


def log_lines(env: Env, text: str) -> list[str]:
    return [line for line in env.logs if text in line]


# ── one fault, one pass ──────────────────────────────────────────────────────


async def prepared(env: Env) -> Stored:
    """Registered, a deleted session queued and a new session running: a pass has a snapshot
    row, an announcement and a deletion to send. What the store holds then."""
    await env.pair()
    await delete(env, "gone")
    env.clock.advance(10)
    running(env, "s1")
    return await stored(env.store)


async def failed_pass(
    env: Env, publish: Callable[[], Awaitable[float | None]], *, delay: float = 5.0
) -> str:
    """A pass that fails: it asks for `delay` and logs exactly one line, which is returned."""
    mark = len(env.logs)
    assert await publish() == delay
    (line,) = env.logs[mark:]
    assert line.startswith("[relay] Talaria relay snapshot "), line
    assert f"; retrying in {delay:.1f}s" in line, line
    return line


async def recovered(
    env: Env, before: Stored, publish: Callable[[], Awaitable[float | None]]
) -> None:
    """The fault is gone: the next pass logs `recovered`, and the relay has the row, the
    announcement (once) and the deletion's acknowledgement; the store lost nothing."""
    await assert_intact(env.store, before, acked=("gone",))
    mark = len(env.logs)
    assert await publish() is None
    assert env.logs[mark:] == ["[relay] Talaria relay snapshot recovered"]
    scope = await env.profile_id()
    assert "s1" in [row.session_id for row in env.relay.rows(PUBLISHER_ID, scope)]
    assert [e.session_id for e in env.relay.started_events].count("s1") == 1
    assert await env.store.pending_deleted() == []
    assert "gone" in [ack.session_id for ack in env.relay.viewed]
    await assert_intact(env.store, before, acked=("gone",))
