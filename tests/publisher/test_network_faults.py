"""Faults between the publisher and the relay, on real loopback sockets.

The `Wire` diverts one request to a loopback server that misbehaves: a closed port, a reset, an
answer that never ends or is too large, no TLS or an untrusted certificate, a redirect. Whatever
the fault, the pass fails with one `[relay]` line and the 5 s backoff, the store keeps all it
held, and the next pass (the fault gone) publishes the row, the announcement and the deletion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from backends import MEMORY, on
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from faultserver import (
    OVERSIZE,
    Behaviour,
    answer,
    closed_port,
    endless_body,
    endless_head,
    fault_server,
    plain_http,
    redirect,
    reset_before_answer,
    reset_mid_body,
    self_signed,
)
from harness import RELAY_URL, Env, relay_env
from intact import failed_pass, log_lines, prepared, recovered

from relay.client import RelayClient
from relay.errors import (
    RelayHttpError,
    RelayPairingError,
    RelayResponseError,
    RelayTimeoutError,
)
from relay.protocol import compact
from relay.store import RelayStore

# Held no longer than the 0.3 s timeout or the status line: a bound that a loaded machine (or
# xdist workers) keeps, and still half the client's default timeout of 10 s.
BOUND_S = 5.0
UNREACHABLE = "snapshot failed for profile default (Could not reach Talaria Relay: "


# Each case also proves that no key (the tests' own too), invitation or signature reached a log
# record, a reported line or an error message.
# The network's faults do not depend on the store: one backend is enough, the memory store.
pytestmark = [pytest.mark.usefixtures("no_secret_leaks"), on(MEMORY)]


async def snapshot_fault(env: Env, origin: str, expected: str) -> str:
    """The next snapshot goes to `origin` and fails as `expected`; then everything recovers."""
    before = await prepared(env)
    sent = len(env.relay.requests)
    env.wire.divert("snapshot", origin)
    line = await failed_pass(env, env.publish)
    assert expected in line, line
    assert env.relay.requests[sent:] == []  # the pass stopped at its snapshot
    await recovered(env, before, env.publish)
    return line


async def registration_fault(env: Env, origin: str, expected: str) -> None:
    """Registering through `origin` fails with 502 and `expected`; nothing is saved, and
    registering again then works."""
    env.wire.divert("publisher_redeem", origin)
    with pytest.raises(RelayPairingError, match=expected) as raised:
        await env.pair()
    assert raised.value.status == 502
    assert await env.store.load_config() is None
    assert env.relay.keys() == []
    assert (await env.pair())["ok"] is True


async def test_a_refused_connection_backs_off_and_recovers(store: RelayStore) -> None:
    """A relay port that refuses connections fails the pass with one line and the backoff."""
    async with relay_env(store) as env:
        await snapshot_fault(env, f"http://127.0.0.1:{closed_port()}", UNREACHABLE)


async def test_a_connection_reset_before_the_answer_backs_off(store: RelayStore) -> None:
    """A relay that reads the snapshot and resets the connection without answering fails the
    pass (it cannot know whether the relay took it: the next pass sends it again)."""
    async with relay_env(store) as env, fault_server(reset_before_answer) as server:
        line = await snapshot_fault(env, server.origin, UNREACHABLE)
        assert "Connection reset by peer" in line, line
        assert len(server.requests) == 1


async def test_a_registration_reset_mid_answer_saves_nothing(store: RelayStore) -> None:
    """A registration whose answer is cut off mid-body is a 502 `Could not reach` and saves
    nothing: the key is never stored for a registration the relay may not have made."""
    async with relay_env(store) as env, fault_server(reset_mid_body(201)) as server:
        await registration_fault(env, server.origin, "Could not reach Talaria Relay")


async def test_a_put_is_judged_by_its_status_even_if_the_body_is_cut(
    signing_key: Ed25519PrivateKey,
) -> None:
    """A PUT is judged by its status alone: a 200 cut off mid-body is a success (only its
    connection is lost), a 503 cut off mid-body is a 503; neither waits for the rest."""
    for status in (200, 503):
        async with (
            fault_server(reset_mid_body(status)) as server,
            RelayClient(server.origin) as client,
        ):
            began = time.monotonic()
            if status == 200:
                await client.put("/v1/x", b"{}", key=signing_key, key_id="key_x")
            else:
                with pytest.raises(RelayHttpError, match="HTTP 503"):
                    await client.put("/v1/x", b"{}", key=signing_key, key_id="key_x")
            assert time.monotonic() - began < BOUND_S


async def test_an_answer_that_never_finishes_times_out_and_backs_off(store: RelayStore) -> None:
    """A relay whose answer's headers never end holds a pass no longer than the client timeout:
    the pass fails with one line and backs off, and the next one goes through."""
    async with relay_env(store) as env, fault_server(endless_head) as server:
        before = await prepared(env)
        client = RelayClient(RELAY_URL, http=env.http, clock=env.clock, timeout=0.3)
        publisher = await env.publisher_with(client, "impatient")
        env.wire.divert("snapshot", server.origin)
        began = time.monotonic()
        line = await failed_pass(env, publisher.run_once)
        assert (
            "snapshot failed for profile default (Could not reach Talaria Relay: TimeoutError)"
            in line
        ), line
        assert time.monotonic() - began < BOUND_S
        await recovered(env, before, publisher.run_once)
        await publisher.stop()


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        (endless_body(201, chunk=65536, every=0), RelayResponseError),
        (endless_body(201, chunk=1, every=0.02), RelayTimeoutError),
        (answer(201, b'"' + b"x" * OVERSIZE + b'"'), RelayResponseError),
    ],
    ids=["endless-fast", "endless-trickle", "300KiB"],
)
async def test_a_post_answer_that_never_ends_or_is_too_large_is_abandoned(
    behaviour: Behaviour, error: type[Exception]
) -> None:
    """A pairing answer is read up to 256 KiB and within the timeout: an endless or 300 KiB
    body is abandoned (too large, or too slow), never read whole."""
    async with (
        fault_server(behaviour) as server,
        RelayClient(server.origin, timeout=0.3) as client,
    ):
        began = time.monotonic()
        with pytest.raises(error):
            await client.post("/v1/pairings/publisher/redeem", b"{}")
        assert time.monotonic() - began < BOUND_S


@pytest.mark.parametrize(
    "behaviour",
    [
        endless_body(200, chunk=65536, every=0),
        endless_body(200, chunk=1, every=0.02),
        answer(200, b"x" * OVERSIZE, close=False),
    ],
    ids=["endless-fast", "endless-trickle", "300KiB"],
)
async def test_a_put_answer_that_never_ends_or_is_too_large_is_abandoned(
    behaviour: Behaviour, signing_key: Ed25519PrivateKey
) -> None:
    """A PUT succeeds at a 200's status line: an endless, trickling or oversized body is read
    no further than `DRAIN_CAP` bytes or `DRAIN_S` seconds (to keep the connection were it
    short), then dropped with its connection, so the next PUT opens another."""
    async with (
        fault_server(behaviour, keep_alive=True) as server,
        RelayClient(server.origin) as client,
    ):
        for sent in (1, 2):
            began = time.monotonic()
            await client.put("/v1/x", b"{}", key=signing_key, key_id="key_x")
            assert time.monotonic() - began < BOUND_S
            assert (server.connections, len(server.requests)) == (sent, sent)


@pytest.mark.parametrize(
    "behaviour",
    [endless_body(201, chunk=65536, every=0), answer(201, compact({"pad": "x" * OVERSIZE}))],
    ids=["endless", "300KiB"],
)
async def test_a_registration_answer_over_the_cap_saves_nothing(
    store: RelayStore, behaviour: Behaviour
) -> None:
    """A registration answered with an endless or a 300 KiB body (valid JSON or not) is a 502
    `invalid response` and saves nothing."""
    async with relay_env(store) as env, fault_server(behaviour) as server:
        await registration_fault(env, server.origin, "returned an invalid response")


@pytest.mark.parametrize("certificate", ["none", "self-signed"])
async def test_a_tls_failure_backs_off_and_recovers(
    store: RelayStore, tmp_path: Path, certificate: str
) -> None:
    """An https relay that speaks plain HTTP, or shows a certificate nobody signed, fails the
    TLS handshake: one line, the backoff, nothing sent, and recovery once TLS works again."""
    tls = self_signed(tmp_path) if certificate == "self-signed" else None
    async with (
        relay_env(store) as env,
        fault_server(
            plain_http if tls is None else answer(200), tls=tls, read_first=tls is not None
        ) as server,
    ):
        origin = server.origin.replace("http://", "https://")
        line = await snapshot_fault(env, origin, UNREACHABLE)
        assert "SSL" in line or "certificate" in line, line
        assert server.requests == []  # no request ever went out in the clear or to that peer


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_never_followed_and_is_retried(store: RelayStore, status: int) -> None:
    """A 3xx is not followed, even by a client told to follow redirects: the place it names
    receives nothing (the signature covers one path, pairing trusted one origin). It says
    nothing against the request, so it is retried with the backoff, the profile kept."""
    async with (
        relay_env(store) as env,
        fault_server(answer(200)) as target,
        fault_server(redirect(status, target.origin + "/v1/elsewhere")) as server,
    ):
        env.http.follow_redirects = True
        line = await snapshot_fault(env, server.origin, f"HTTP {status} (a redirect, not followed)")
        assert line.startswith(
            "[relay] Talaria relay snapshot failed for profile default (Talaria relay returned"
        )
        assert target.requests == []
        assert not log_lines(env, "disabled profile")


async def test_a_redirected_registration_saves_nothing(store: RelayStore) -> None:
    """A registration answered with a redirect is a 502, and the place it names hears nothing."""
    async with (
        relay_env(store) as env,
        fault_server(answer(201, b"{}")) as target,
        fault_server(redirect(307, target.origin + "/v1/pairings/publisher/redeem")) as server,
    ):
        env.http.follow_redirects = True
        await registration_fault(env, server.origin, r"rejected server registration \(HTTP 307\)")
        assert target.requests == []
