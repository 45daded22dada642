"""What a relay's answer says besides its status: `Retry-After`, and the relay's clock (`Date`).

Retry-After (on a 429 or 503, in seconds or as an HTTP-date) lengthens the backoff to what the
relay asked, jittered upwards, never past 300 s, and never shortens it. A 401 whose `Date` puts
this server's clock more than 5 minutes off the relay's is a clock problem: logged as one, and
retried (a fixed clock recovers by itself) instead of disabling the profile like a refused key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from harness import Env, relay_env, restarted
from intact import failed_pass, log_lines, prepared, recovered

from relay.client import RelayClient
from relay.errors import RelayHttpError
from relay.publishing.loop import retry_delay
from relay.store import RelayStore

NOW = 1_800_000_000.0


# Each case also proves that no key (the tests' own too), invitation or signature reached a log
# record, a reported line or an error message.
# What the relay answers does not depend on the store: one backend is enough, the memory store.
pytestmark = [pytest.mark.usefixtures("no_secret_leaks"), on(MEMORY)]


@dataclass
class Skewed:
    """The env's clock moved by `offset` seconds: this server's clock, gone wrong."""

    env: Env
    offset: float

    def __call__(self) -> float:
        return self.env.clock() + self.offset


# ── Retry-After ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("status", "retry_after", "delay"),
    [
        (429, "30", 30.0),
        (503, "120", 120.0),
        (429, "2", 5.0),  # shorter than the backoff: the backoff
        (503, "86400", 300.0),  # longer than the cap: the cap
        (429, "soon", 5.0),  # neither seconds nor a date: ignored
        (500, "30", 5.0),  # only a 429 or a 503 carries it
    ],
)
async def test_retry_after_sets_the_wait_within_the_backoff_and_its_cap(
    store: RelayStore, status: int, retry_after: str, delay: float
) -> None:
    """The pass after a 429 or 503 with Retry-After waits max(backoff, Retry-After), 300 s at
    most, says so in its one line, and the pass after recovers."""
    async with relay_env(store) as env:
        before = await prepared(env)
        env.relay.inject("snapshot", status, headers={"Retry-After": retry_after})
        line = await failed_pass(env, env.publish, delay=delay)
        assert f"(Talaria relay returned HTTP {status})" in line
        assert ("(Retry-After: " in line) == (status in (429, 503) and retry_after.isdigit())
        await recovered(env, before, env.publish)


async def test_retry_after_as_a_date_counts_from_the_relays_clock(store: RelayStore) -> None:
    """An HTTP-date Retry-After is read against the relay's `Date`, so a publisher whose clock
    is a minute fast still waits the 90 s the relay meant, not 30."""
    async with relay_env(store) as env:
        before = await prepared(env)
        async with restarted(env, clock=Skewed(env, 60)) as publisher:
            at = formatdate(env.clock() + 90, usegmt=True)
            env.relay.inject("started", 429, headers={"Retry-After": at})
            line = await failed_pass(env, publisher.run_once, delay=90.0)
            assert "(Talaria relay returned HTTP 429); retrying in 90.0s" in line
            await recovered(env, before, publisher.run_once)


async def test_the_longest_retry_after_of_a_pass_is_honoured(store: RelayStore) -> None:
    """Two profiles refused in one pass, one without Retry-After and one asking for 60 s: the
    pass waits 60 s."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair()
        await env.pair("work", user="usr_work")
        env.relay.inject("snapshot", 503)  # `default` goes first
        env.relay.inject("snapshot", 429, headers={"Retry-After": "60"})
        assert await env.publish() == 60.0
        assert await env.publish() is None


def test_retry_after_is_jittered_upwards_only() -> None:
    """The wait for a Retry-After of 100 s lies in [100, 120] s: never sooner than asked."""
    asked = RelayHttpError(429, retry_after=100.0)
    assert retry_delay(1, asked, lambda low, _high: low) == 100.0
    assert retry_delay(1, asked, lambda _low, high: high) == 120.0
    assert retry_delay(1, RelayHttpError(429, retry_after=290.0), lambda _low, high: high) == 300


# ── the relay's clock ────────────────────────────────────────────────────────


@pytest.mark.parametrize(("offset", "direction"), [(600, "ahead of"), (-600, "behind")])
async def test_a_clock_beyond_five_minutes_is_logged_as_a_clock_problem_and_retried(
    store: RelayStore, offset: int, direction: str
) -> None:
    """A publisher whose clock is 10 minutes off gets 401 from the relay: one line per pass
    says the clock is off and by how much, the profile is not disabled, nothing is lost, and
    the first pass after the clock is fixed publishes everything."""
    async with relay_env(store) as env:
        before = await prepared(env)
        clock = Skewed(env, offset)
        async with restarted(env, clock=clock) as publisher:
            line = await failed_pass(env, publisher.run_once)
            assert line == (
                "[relay] Talaria relay snapshot failed for profile default "
                "(Talaria relay returned HTTP 401: "
                f"this server's clock is 600s {direction} the relay's, beyond the 300s a "
                "signature allows; check this server's clock (NTP)); retrying in 5.0s"
            )
            line = await failed_pass(env, publisher.run_once, delay=10.0)
            assert line.startswith(
                "[relay] Talaria relay snapshot still failing for profile default ("
            )
            assert not log_lines(env, "disabled profile")
            assert {r.status for r in env.relay.requests[-2:]} == {401}

            clock.offset = 0
            await recovered(env, before, publisher.run_once)


async def test_a_skew_within_the_window_is_accepted(store: RelayStore) -> None:
    """Four minutes off is within the relay's five: everything is published at once."""
    async with relay_env(store) as env:
        await prepared(env)
        async with restarted(env, clock=Skewed(env, 240)) as publisher:
            assert await publisher.run_once() is None
        assert not log_lines(env, "failed")


STORE_NOTE = "this server's clock is 600.0s ahead of the store's (the other replicas' time)"


async def test_a_401_from_a_server_far_off_the_relays_and_the_stores_clock_says_both(
    store: RelayStore,
) -> None:
    """A replica 10 minutes ahead of the relay and of the store's clock (as its last reading of
    it says): its retried 401s name both offsets."""
    async with relay_env(store) as env:
        await prepared(env)
        service = env.new_service(clock=Skewed(env, 600))
        service.store_clock.follow = True
        now = service.store_clock.ticks()
        service.store_clock.read(now, now, round(env.clock() * 1000))
        assert await service.start()
        publisher = service.current()
        assert publisher is not None
        try:
            line = await failed_pass(env, publisher.run_once)
        finally:
            await service.stop()
        assert line == (
            "[relay] Talaria relay snapshot failed for profile default (Talaria relay returned "
            "HTTP 401: this server's clock is 600s ahead of the relay's, beyond the 300s a "
            f"signature allows; check this server's clock (NTP); {STORE_NOTE}); retrying in 5.0s"
        )


async def test_a_refused_key_from_a_server_far_off_the_stores_clock_names_the_offset(
    store: RelayStore,
) -> None:
    """A 401 the relay's Date does not blame on the clock disables the profile, as before; with
    this replica 10 minutes off the store's clock, the line says so."""
    async with relay_env(store) as env:
        await prepared(env)
        service = env.new_service()
        service.store_clock.follow = True
        now = service.store_clock.ticks()
        service.store_clock.read(now, now, round((env.clock() - 600) * 1000))
        assert await service.start()
        publisher = service.current()
        assert publisher is not None
        env.relay.inject("snapshot", 401)
        try:
            await publisher.run_once()
        finally:
            await service.stop()
        assert log_lines(env, "disabled profile") == [
            "[relay] Talaria relay disabled profile default after permanent HTTP 401; "
            f"{STORE_NOTE}: the relay refuses signatures more than 300s off its own clock, "
            "check this server's clock (NTP)"
        ]


@pytest.mark.parametrize(
    ("date", "retryable"),
    [
        (formatdate(NOW - 301, usegmt=True), True),
        (formatdate(NOW + 301, usegmt=True), True),
        (formatdate(NOW - 299, usegmt=True), False),  # the clock is fine: the key was refused
        (None, False),  # no Date: nothing says it is the clock
        ("yesterday", False),
    ],
)
async def test_a_401_is_a_clock_problem_only_when_the_relays_date_says_so(
    date: str | None, retryable: bool, signing_key: Ed25519PrivateKey
) -> None:
    """A 401 is retryable (with `clock_skew` set) only when the relay's Date is more than 300 s
    from our clock; otherwise it is the permanent refusal it always was."""
    headers = {} if date is None else {"Date": date}
    error = await refused(httpx.Response(401, headers=headers), signing_key)
    assert error.retryable is retryable
    assert (error.clock_skew is not None) is retryable


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": " 7 "}, 7.0),
        ({"Retry-After": formatdate(NOW + 40, usegmt=True)}, 40.0),  # against our clock
        ({"Retry-After": formatdate(NOW + 40), "Date": formatdate(NOW + 30)}, 10.0),
        ({"Retry-After": formatdate(NOW - 40, usegmt=True)}, 0.0),  # already past
        ({"Retry-After": "9" * 5000}, 1e10),
        ({"Retry-After": "-5"}, None),
        ({"Retry-After": "1.5"}, None),
        ({"Retry-After": ""}, None),
        ({}, None),
    ],
)
async def test_retry_after_is_read_as_seconds_or_an_http_date(
    headers: dict[str, str], retry_after: float | None, signing_key: Ed25519PrivateKey
) -> None:
    """Retry-After is delta-seconds or an HTTP-date (against the relay's Date when it sends
    one); anything else is ignored."""
    error = await refused(httpx.Response(503, headers=headers), signing_key)
    assert error.retry_after == retry_after


async def test_a_redirect_is_a_retryable_error_that_says_so(signing_key: Ed25519PrivateKey) -> None:
    """A 3xx raises `RelayHttpError`, retryable, whose message says it was not followed."""
    error = await refused(
        httpx.Response(308, headers={"Location": "https://elsewhere.example/"}), signing_key
    )
    assert error.retryable
    assert str(error) == "Talaria relay returned HTTP 308 (a redirect, not followed)"


async def refused(response: httpx.Response, key: Ed25519PrivateKey) -> RelayHttpError:
    """The error a signed PUT raises when the relay answers `response`, at our clock NOW."""
    answer: Callable[[httpx.Request], Any] = lambda _request: response  # noqa: E731
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = RelayClient("https://relay.example", http=http, clock=lambda: NOW)
        with pytest.raises(RelayHttpError) as raised:
            await client.put("/v1/x", b"{}", key=key, key_id="key_x")
    return raised.value
