"""Profiles side by side: a pass's snapshot PUTs in flight together, a bounded number at a time,
each profile's outcome its own (upstream's isolation).

The wire holds every snapshot PUT (`Stall`) and the test releases them one by one, so which
answer comes back first is the test's choice, not the scheduler's.
"""

from __future__ import annotations

import asyncio

from backends import MEMORY, on
from harness import PUBLISHER_ID, Env, Stall, relay_env

from relay.errors import RelayHttpError
from relay.protocol import snapshot_path
from relay.publishing.fanout import SNAPSHOT_CONCURRENCY
from relay.store import RelayStore

pytestmark = on(MEMORY)

THREE = ("default", "work", "home")
FOUR = (*THREE, "spare")
# More profiles than may be in flight at once.
MANY = ("default", *(f"p{n}" for n in range(1, SNAPSHOT_CONCURRENCY + 4)))


async def paired(env: Env, profiles: tuple[str, ...]) -> dict[str, str]:
    """Register with the first profile, enroll the others, each with a running session; each
    profile's snapshot path, in config order (by name)."""
    await env.pair(profiles[0])
    for profile in profiles[1:]:
        await env.pair(profile, user=f"usr_{profile}")
    config = await env.config()
    for profile in profiles:
        env.host.create_session(f"s-{profile}", profile=profile)
        env.host.start_run(f"s-{profile}")
    return {
        p: snapshot_path(PUBLISHER_ID, grant.profile_id) for p, grant in config.profiles.items()
    }


async def answer(stall: Stall, path: str) -> None:
    """Release the request held for `path` and wait for the relay's answer to it."""
    answered = stall.answered.count(path)
    stall.release(path)
    await stall.until(lambda s: s.answered.count(path) > answered)


def statuses(env: Env, mark: int) -> dict[str, int]:
    """Each snapshot path's status among the requests after the first `mark`."""
    return {r.path: r.status for r in env.relay.requests[mark:] if r.route == "snapshot"}


def published(env: Env, paths: dict[str, str], profile: str) -> bool:
    """Whether the relay holds `profile`'s running session."""
    profile_id = paths[profile].split("/")[-2]
    rows = env.relay.rows(PUBLISHER_ID, profile_id)
    return [row.session_id for row in rows] == [f"s-{profile}"]


async def test_a_pass_has_its_snapshots_in_flight_together_never_more_than_the_bound(
    store: RelayStore,
) -> None:
    """With every snapshot PUT held at the relay, a pass of more profiles than the bound has
    exactly `SNAPSHOT_CONCURRENCY` in flight (the earliest profiles'), and sends the rest as
    those come back: every profile is published."""
    async with relay_env(store, profiles=MANY) as env:
        paths = await paired(env, MANY)
        stall = env.wire.stall("snapshot")
        passing = asyncio.create_task(env.publish())
        await stall.until(lambda s: len(s.held) >= SNAPSHOT_CONCURRENCY)
        for _ in range(100):  # room for a PUT beyond the bound to arrive, were one sent
            await asyncio.sleep(0)
        assert set(stall.held) == set(list(paths.values())[:SNAPSHOT_CONCURRENCY])
        stall.release()
        assert await passing is None
        assert stall.most_in_flight == SNAPSHOT_CONCURRENCY
        assert sorted(stall.answered) == sorted(paths.values())
        assert all(published(env, paths, p) for p in MANY)


async def test_a_permanent_refusal_disables_its_profile_alone_while_the_others_are_in_flight(
    store: RelayStore,
) -> None:
    """`work`'s PUT is refused for good (403) while `default`'s and `home`'s are in flight:
    theirs still reach the relay in that pass, and only `work` is disabled, with one line."""
    async with relay_env(store, profiles=THREE) as env:
        paths = await paired(env, THREE)
        mark = len(env.relay.requests)
        stall = env.wire.stall("snapshot")
        passing = asyncio.create_task(env.publish())
        await stall.until(lambda s: len(s.held) == len(THREE))
        env.relay.inject("snapshot", 403)
        await answer(stall, paths["work"])
        stall.release()
        assert await passing is None
        assert statuses(env, mark) == {
            paths["default"]: 200,
            paths["work"]: 403,
            paths["home"]: 200,
        }
        assert published(env, paths, "default")
        assert published(env, paths, "home")
        disabled = "[relay] Talaria relay disabled profile work after permanent HTTP 403"
        assert env.logs.count(disabled) == 1

        mark = len(env.relay.requests)
        assert await env.publish() is None
        assert statuses(env, mark) == {paths["default"]: 200, paths["home"]: 200}


async def test_retryable_refusals_back_off_once_every_profile_was_attempted_for_the_longest_wait(
    store: RelayStore,
) -> None:
    """`work` (503, Retry-After 20 s) comes back first, `spare` (429, 60 s) next, `home` (503,
    5 s) last, while `default` is still in flight: the pass ends only once `default` was
    published, and then backs off for 60 s, the longest wait asked for: neither the first nor
    the last answer's, nor the earliest profile's; nothing is disabled."""
    async with relay_env(store, profiles=FOUR) as env:
        paths = await paired(env, FOUR)
        stall = env.wire.stall("snapshot")
        passing = asyncio.create_task(env.publish())
        await stall.until(lambda s: len(s.held) == len(FOUR))
        for profile, status, wait in (
            ("work", 503, "20"),
            ("spare", 429, "60"),
            ("home", 503, "5"),
        ):
            env.relay.inject("snapshot", status, headers={"Retry-After": wait})
            await answer(stall, paths[profile])
        assert not passing.done()
        stall.release()
        assert await passing == 60.0
        assert published(env, paths, "default")
        assert "snapshot failed for profile spare (Talaria relay returned HTTP 429)" in env.logs[-1]
        assert not [line for line in env.logs if "disabled" in line]

        mark = len(env.relay.requests)
        assert await env.publish() is None
        assert statuses(env, mark) == dict.fromkeys(paths.values(), 200)


async def test_without_isolation_the_earliest_profiles_failure_is_raised(
    store: RelayStore,
) -> None:
    """`publish_snapshot()` outside the loop: `work` is refused first (503), `home` after it
    (403); what is raised, once `default` was published too, is `home`'s, the earliest failed
    profile in config order (by name), and nothing is disabled."""
    async with relay_env(store, profiles=THREE) as env:
        paths = await paired(env, THREE)
        stall = env.wire.stall("snapshot")
        publishing = asyncio.create_task(env.publisher.publish_snapshot())
        await stall.until(lambda s: len(s.held) == len(THREE))
        for profile, status in (("work", 503), ("home", 403)):
            env.relay.inject("snapshot", status)
            await answer(stall, paths[profile])
        assert not publishing.done()
        stall.release()
        error = await asyncio.gather(publishing, return_exceptions=True)
        assert isinstance(error[0], RelayHttpError)
        assert (error[0].status, error[0].profile) == (403, "home")
        assert published(env, paths, "default")

        mark = len(env.relay.requests)
        await env.publisher.publish_snapshot()
        assert statuses(env, mark) == dict.fromkeys(paths.values(), 200)


async def test_alert_eligibility_refused_in_flight_is_resent_without_it_for_each_profile(
    store: RelayStore,
) -> None:
    """A relay older than alertEligible refuses both snapshots that carry it (two profiles with
    a browser present, in flight together): each is sent again without the field and accepted,
    nothing is disabled, and later snapshots omit it."""
    async with relay_env(store, profiles=("default", "work")) as env:
        paths = await paired(env, ("default", "work"))
        for profile in ("default", "work"):
            body = {"tab_id": f"tab_{profile}_00", "active": True, "seq": 1}
            await env.service.update_presence(body, profile)
        mark = len(env.relay.requests)
        env.relay.inject("snapshot", 400, times=2)
        stall = env.wire.stall("snapshot")
        passing = asyncio.create_task(env.publish())
        await stall.until(lambda s: len(s.held) == 2)
        for path in paths.values():  # both refused before either is sent again
            await answer(stall, path)
        stall.release()
        assert await passing is None
        sent = [
            (r.path, r.status, b"alertEligible" in r.body)
            for r in env.relay.requests[mark:]
            if r.route == "snapshot"
        ]
        assert sorted(sent) == sorted(
            [(path, 400, True) for path in paths.values()]
            + [(path, 200, False) for path in paths.values()]
        )
        assert len([line for line in env.logs if "rejected alertEligible" in line]) == 2
        assert not [line for line in env.logs if "disabled" in line]
        assert await env.publish() is None
        assert not any(b"alertEligible" in r.body for r in env.sent("snapshot")[-2:])
