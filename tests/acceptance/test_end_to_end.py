"""End to end over real loopback HTTP: service, MemoryHost and dev relay, loops running."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import httpx
from backends import REAL, on

from relay.service import RelayService
from relay.store import RelayStore, open_store
from relay.testing import DevRelay, MemoryHost, serve

# Over real loopback with the loops running: a real store, as in production.
pytestmark = on(*REAL)

PUBLISHER_ID = "http://hermes.localhost"
WAIT_S = 15.0


async def eventually(check: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Wait for the background publisher to make `check` true."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not await _value(check()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _value(result: bool | Awaitable[bool]) -> bool:
    return await result if inspect.isawaitable(result) else result


def pairing(relay: DevRelay, url: str, user: str) -> dict[str, str]:
    return {
        "relay_url": url,
        "publisher_id": PUBLISHER_ID,
        "publisher_invitation": relay.mint_invitation(user),
    }


async def test_the_whole_publisher_lifecycle_over_loopback(store_url: str) -> None:
    """Register, enroll, run through the phases, mute, view, delete, restart: all verified."""
    relay = DevRelay()
    host = MemoryHost(["default", "work"])
    async with serve(relay) as url, httpx.AsyncClient() as http, open_store(store_url) as store:

        def service() -> RelayService:
            return RelayService(store, host, relay_url=url, allow_insecure_loopback=True, http=http)

        first = service()
        assert await first.start() is False  # nothing registered yet
        assert await first.pair(pairing(relay, url, "usr_owner"), "default", operator=True) == {
            "ok": True,
            "publisher_id": PUBLISHER_ID,
        }
        await first.pair(pairing(relay, url, "usr_work"), "work", operator=False)
        config = await store.load_config()
        assert config is not None
        default_id, work_id = (config.profiles[p].profile_id for p in ("default", "work"))

        def row(profile_id: str, session_id: str) -> str | None:
            rows = [r for r in relay.rows(PUBLISHER_ID, profile_id) if r.session_id == session_id]
            return rows[0].phase if rows else None

        # A run starts, waits for approval, then completes; each phase reaches the relay.
        host.create_session("chat-1", "default", "Plan the trip")
        host.start_run("chat-1", "stream-1", phase="agent_starting")
        first.changed()
        await eventually(lambda: row(default_id, "chat-1") == "starting", "starting")
        host.set_run_phase("stream-1", "running")
        host.set_pending("chat-1", approval=True)
        first.changed()
        await eventually(lambda: row(default_id, "chat-1") == "waiting_for_approval", "approval")
        host.set_pending("chat-1")
        await first.note_terminal("stream-1", "completed")
        host.end_run("stream-1")
        await eventually(lambda: row(default_id, "chat-1") == "completed", "completed")

        # A browser tab of `work` is present: its profile's states are published muted.
        await first.update_presence({"tab_id": "tab-work-1", "active": True, "seq": 1}, "work")
        host.create_session("chat-2", "work", "Review the draft")
        host.start_run("chat-2", "stream-2")
        first.changed()

        def muted() -> bool:
            rows = [r for r in relay.rows(PUBLISHER_ID, work_id) if r.session_id == "chat-2"]
            return bool(rows) and rows[0].alert_eligible is False

        await eventually(muted, "a muted state for work")
        assert all(r.alert_eligible is None for r in relay.rows(PUBLISHER_ID, default_id))

        # Viewing the finished chat acknowledges its completion on the relay.
        await first.mark_viewed("chat-1")
        await eventually(lambda: any(v.session_id == "chat-1" for v in relay.viewed), "viewed")

        # Deleting a finished session queues its acknowledgement durably, then clears it.
        host.create_session("chat-3", "default", "Old chat")
        host.start_run("chat-3", "stream-3")
        await first.note_terminal("stream-3", "failed")
        host.end_run("stream-3")
        await eventually(lambda: row(default_id, "chat-3") == "failed", "failed")
        # Announced in the same pass, after the snapshot: let it finish before the deletion.
        await eventually(lambda: "chat-3" in {e.session_id for e in relay.started_events}, "start")
        host.delete_session("chat-3")
        await first.clear_deleted("chat-3", "default")
        await eventually(lambda: any(v.session_id == "chat-3" for v in relay.viewed), "deleted ack")
        await eventually(lambda: _outbox_empty(store), "an empty outbox")

        announced = sorted(e.session_id for e in relay.started_events)
        assert announced == ["chat-1", "chat-2", "chat-3"]
        floor = await store.revision_floor()
        await first.stop()

        # A restarted service resumes from the store: higher revisions, no second announcement.
        second = service()
        assert await second.start() is True
        second.changed()
        requests_before = len(relay.requests)
        # chat-2's own snapshot, not merely the first request (the other profile's may come first).
        await eventually(
            lambda: any(
                r.route == "snapshot" and work_id in r.path
                for r in relay.requests[requests_before:]
            ),
            "chat-2 republished",
        )
        assert row(work_id, "chat-2") == "running"
        # Waited for too: the first service's last request may land after the restart, and
        # satisfy the wait above before the second service's first pass is done.
        await eventually(lambda: _floor_above(store, floor), "higher revisions")
        assert sorted(e.session_id for e in relay.started_events) == announced
        assert all(r.status < 300 for r in relay.requests if r.route is not None)
        await second.stop()


async def _floor_above(store: RelayStore, floor: int) -> bool:
    return await store.revision_floor() > floor


async def _outbox_empty(store: RelayStore) -> bool:
    return not await store.pending_deleted()
