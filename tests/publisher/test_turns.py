"""Issue 15 in one process: a session's row never goes back to an older turn, whatever a replica
forgets (a restart under its own name, a turn its host drops, a row past its retention).

Replicas here are services on one store, each with a web app (`MemoryHost`) of its own, passes
run when the test says, and one clock the test moves. The relay's history of each session is
the judge: no turn older than one it showed, and each dead turn ended once.
"""

from __future__ import annotations

from backends import REAL, on
from harness import Env, make_service, relay_env

from relay.cli.status import render
from relay.operator.facts import gather
from relay.protocol import TERMINAL_RETENTION_S
from relay.service import RelayService
from relay.store import RelayStore
from relay.testing import MemoryHost

pytestmark = on("memory", *REAL)

LEASE_S = 20.0


def history(env: Env, session: str) -> list[tuple[str | None, str]]:
    """Each (stream, phase) the relay's row of `session` went through, repeats folded."""
    seen: list[tuple[str | None, str]] = []
    for grant in env.relay._grants.values():
        for sid, stream, phase in grant.history:
            if sid == session and (not seen or seen[-1] != (stream, phase)):
                seen.append((stream, phase))
    return seen


def went_back(steps: list[tuple[str | None, str]]) -> bool:
    streams = [stream or "" for stream, _ in steps]
    return streams != sorted(streams)


async def replica(env: Env, name: str, host: MemoryHost | None = None) -> RelayService:
    """A started replica named `name` on the env's store, with a web app of its own."""
    service = make_service(env, host=host or MemoryHost(clock=env.clock), owner=name)
    assert await service.start()
    return service


async def publish(*services: RelayService) -> None:
    for service in services:
        publisher = service.current()
        assert publisher is not None
        assert await publisher.run_once() is None


def hosting(service: RelayService) -> MemoryHost:
    host = service.host
    assert isinstance(host, MemoryHost)
    return host


async def test_a_restart_under_the_same_name_ends_the_dead_processs_turns_once(
    store: RelayStore,
) -> None:
    """web-1 dies hosting a session's newest turn while web-2 still runs the turn it superseded
    and web-3 remembers an older outcome; web-1 comes back at once under its name, hosting
    nothing. The row stays the newest turn and ends `failed` once, after the lease."""
    async with relay_env(store) as env:
        await env.pair()
        web2, web3 = await replica(env, "web-2"), await replica(env, "web-3")
        web1 = await replica(env, "web-1")
        for service in (web1, web2, web3):
            hosting(service).create_session("s1", created_at=env.clock())
        hosting(web3).start_run("s1", "t1", started_at=env.clock())
        await publish(web3)
        await web3.note_terminal("t1", "completed")
        hosting(web3).end_run("t1")
        env.clock.advance(1)
        hosting(web2).start_run("s1", "t2", started_at=env.clock())
        env.clock.advance(1)
        hosting(web1).start_run("s1", "t3", started_at=env.clock())
        await publish(web3, web2, web1)
        assert history(env, "s1")[-1] == ("t3", "running")
        # kill -9: web-1 runs no more passes and cleans nothing up.
        again = await replica(env, "web-1")
        assert again.owner != web1.owner
        assert again.owner.startswith("web-1/")
        for _ in range(3):
            env.clock.advance(LEASE_S / 2)
            await publish(again, web2, web3)
        assert history(env, "s1") == [
            ("t1", "running"),
            ("t1", "completed"),
            ("t2", "running"),
            ("t3", "running"),
            ("t3", "failed"),
        ]
        (row,) = await store.run_states()
        assert (row.stream_id, row.phase, row.owner) == ("t3", "failed", again.owner)
        for service in (again, web2, web3):
            await service.stop()


async def test_a_turn_its_host_drops_without_an_outcome_ends_failed_once(
    store: RelayStore,
) -> None:
    """web-1's newest turn leaves its host with no outcome while web-2 still runs the older
    one: the relay shows the newest turn `failed`, once, never the older one again."""
    async with relay_env(store) as env:
        await env.pair()
        web1, web2 = await replica(env, "web-1"), await replica(env, "web-2")
        for service in (web1, web2):
            hosting(service).create_session("s1", created_at=env.clock())
        hosting(web2).start_run("s1", "t1", started_at=env.clock())
        await publish(web2)
        env.clock.advance(1)
        hosting(web1).start_run("s1", "t2", started_at=env.clock())
        await publish(web1, web2)
        hosting(web1).end_run("t2")  # no note_terminal
        for _ in range(3):
            env.clock.advance(5)
            await publish(web1, web2)
        assert history(env, "s1") == [("t1", "running"), ("t2", "running"), ("t2", "failed")]
        for service in (web1, web2):
            await service.stop()


async def test_a_pruned_row_lets_no_older_turn_back(store: RelayStore) -> None:
    """A session's newest turn ended and its row passed the 15-minute retention while an older
    turn of it still runs on another replica: that turn never becomes the row again."""
    async with relay_env(store) as env:
        await env.pair()
        web1, web2 = await replica(env, "web-1"), await replica(env, "web-2")
        for service in (web1, web2):
            hosting(service).create_session("s1", created_at=env.clock())
        hosting(web2).start_run("s1", "t1", started_at=env.clock())
        env.clock.advance(1)
        hosting(web1).start_run("s1", "t2", started_at=env.clock())
        await publish(web2, web1)
        await web1.note_terminal("t2", "completed")
        hosting(web1).end_run("t2")
        await publish(web1, web2)
        for _ in range(4):
            env.clock.advance(TERMINAL_RETENTION_S / 3)
            await publish(web1, web2)
        assert await store.run_states() == []
        steps = history(env, "s1")
        assert steps == [("t1", "running"), ("t2", "running"), ("t2", "completed")]
        assert not went_back(steps)
        for service in (web1, web2):
            await service.stop()


async def test_an_unreadable_session_keeps_its_turn_running(store: RelayStore) -> None:
    """A hosted turn whose session metadata cannot be read for a few passes is still offered
    as it was (it did not end), and its outcome is published once the turn ends."""
    async with relay_env(store) as env:
        await env.pair()
        web1 = await replica(env, "web-1")
        host = hosting(web1)
        host.create_session("s1", created_at=env.clock())
        host.start_run("s1", "t1", started_at=env.clock())
        await publish(web1)
        readable = host.session_meta

        async def unreadable(session_id: str) -> object:
            raise OSError("disk gone")

        host.session_meta = unreadable  # type: ignore[method-assign,assignment]
        await publish(web1)
        await web1.note_terminal("t1", "completed")
        host.end_run("t1")
        await publish(web1)
        host.session_meta = readable  # type: ignore[method-assign]
        await publish(web1)
        assert history(env, "s1") == [("t1", "running"), ("t1", "completed")]
        await web1.stop()


async def test_status_names_each_replica_and_its_incarnation(store: RelayStore) -> None:
    """Two processes under one name are two incarnations; status shows the name and each."""
    async with relay_env(store) as env:
        await env.pair()
        first, second = await replica(env, "web-1"), await replica(env, "web-1")
        hosting(first).create_session("s1", created_at=env.clock())
        hosting(first).start_run("s1", "t1", started_at=env.clock())
        await publish(first, second)
        now_ms = int(env.clock() * 1000)
        document = await gather(store, now_ms)
        rows = {row["owner"]: row for row in document["fleet"]["replicas"]}
        found = rows[first.owner]
        assert (found["name"], found["runs"]) == ("web-1", 1)
        assert first.owner == f"web-1/{found['incarnation']}"
        assert len(found["incarnation"]) == 12
        assert second.owner != first.owner
        assert rows[second.owner]["runs"] == 0
        line = render(document).splitlines()
        incarnation = found["incarnation"]
        said = f"replica      web-1, incarnation {incarnation}: 1 run(s), 0 claim(s), alive; "
        assert [n for n in line if n.startswith(said)], line
        for service in (first, second):
            await service.stop()


async def test_a_long_name_still_fits_the_stored_owner_ids(store: RelayStore) -> None:
    """A 64-character name is cut to fit its incarnation id in the store's 64 characters; that
    id holds run rows and the claims of announcements like any other."""
    async with relay_env(store) as env:
        await env.pair()
        long = await replica(env, "n" * 64)
        assert len(long.owner) == 64
        assert long.owner.startswith("n" * 51 + "/")
        hosting(long).create_session("s1", created_at=env.clock())
        hosting(long).start_run("s1", "t1", started_at=env.clock())
        await publish(long)
        (row,) = await store.run_states()
        assert row.owner == long.owner
        assert [e.session_id for e in env.relay.started_events] == ["s1"]
        await long.stop()
