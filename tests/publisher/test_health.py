"""`RelayService.health()`: the store's answers and the publisher loop's, without the relay."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
from backends import MEMORY, on
from harness import relay_env

from relay.errors import ServiceNotStartedError
from relay.store import RelayStore, open_store


@on(MEMORY)
async def test_health_before_and_after_registration_and_after_a_failure(
    store: RelayStore,
) -> None:
    """Unregistered: reachable, no schema, nothing published. Registered and published: the
    last success and its age. A 503: one failure in a row and the end of its backoff; a success
    clears both."""
    async with relay_env(store) as env:
        health = await env.service.health()
        assert (health.store_reachable, health.schema_at_head, health.registered) == (
            True,
            None,
            False,
        )
        assert (health.last_success, health.consecutive_failures, health.ready) == (
            None,
            0,
            False,
        )

        await env.pair()
        assert await env.publish() is None
        published = env.clock()
        env.clock.advance(7)
        health = await env.service.health()
        assert health.registered
        assert health.ready
        assert (health.last_success, health.last_success_age_s) == (published, 7.0)

        env.relay.inject("snapshot", 503)
        assert await env.publish() == 5.0
        health = await env.service.health()
        assert health.consecutive_failures == 1
        assert health.backoff_until == env.clock() + 5.0
        assert health.last_success == published
        assert not health.stopped

        assert await env.publish() is None
        health = await env.service.health()
        assert (health.consecutive_failures, health.backoff_until) == (0, None)
        assert health.last_success == env.clock()


@on("sqlite")
async def test_a_sql_store_reports_its_schema_and_a_closed_one_is_unreachable(
    store_url: str,
) -> None:
    """A SQLite store is at head; once closed it no longer answers."""
    async with open_store(store_url) as store, relay_env(store) as env:
        health = await env.service.health()
        assert health.store_reachable
        assert health.schema_at_head is True
        await store.close()
        health = await env.service.health()
        assert (health.store_reachable, health.ready) == (False, False)


@on(MEMORY)
async def test_a_service_used_before_start_says_so_and_is_not_ready(store: RelayStore) -> None:
    """Before `start()`: every call but `health()` and `stop()` raises `ServiceNotStartedError`
    naming the fix, and `health()` is not ready (no publisher), even on a registered store;
    once started it publishes and is ready."""
    async with relay_env(store) as env:
        await env.pair()
        late = env.new_service()
        calls: list[tuple[str, Callable[[], object]]] = [
            ("changed", late.changed),
            ("flush", late.flush),
            ("mark_viewed", lambda: late.mark_viewed("chat-1")),
            ("note_terminal", lambda: late.note_terminal("stream-1", "completed")),
            ("clear_deleted", lambda: late.clear_deleted("chat-1", "default")),
            ("profile_deleted", lambda: late.profile_deleted("default")),
            ("update_presence", lambda: late.update_presence({}, "default")),
            ("pair", lambda: late.pair({}, "default", operator=True)),
        ]
        for name, call in calls:
            with pytest.raises(ServiceNotStartedError) as caught:
                await _called(call)
            assert f"RelayService.{name}() before start()" in str(caught.value)
            assert "await service.start()" in str(caught.value)
        health = await late.health()
        assert health.registered
        assert (health.publishing, health.ready) == (False, False)

        assert await late.start()
        late.changed()
        health = await late.health()
        assert (health.publishing, health.ready) == (True, True)
        await late.stop()
        assert not (await late.health()).publishing


async def _called(call: Callable[[], object]) -> None:
    result = call()
    if inspect.isawaitable(result):
        await result
