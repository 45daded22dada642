"""What the publisher logs when the host or the code fails, rather than backing off in silence.

A host call whose failure a pass survives (`session_meta`, `session_index`, `agent_sessions`) is
warned of once with its cause, not every pass; a bug in a pass (a `TypeError`) is logged with
its traceback at ERROR and backs off like any failure; the loop keeps running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from backends import MEMORY, on
from harness import RELAY_URL, Env, relay_env

from relay import PublisherOptions
from relay.host import ActiveRun
from relay.publishing.logs import Reporter, Swallowed
from relay.service import RelayService
from relay.store import RelayStore

# Behaviour of the publisher, not of a store: once, on the memory store.
pytestmark = on(MEMORY)

KINDS = ("session_meta", "session_index", "agent_sessions")


async def broken(*_args: object) -> list[str]:
    raise OSError("disk gone")


async def bug() -> Sequence[ActiveRun]:
    raise TypeError("unsupported operand")


def running(env: Env, session_id: str) -> None:
    env.host.create_session(session_id)
    env.host.start_run(session_id)


def lines(env: Env, text: str) -> list[str]:
    return [line for line in env.logs if text in line]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_failing_host_call_is_warned_of_once_with_its_cause(
    store: RelayStore, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three passes with the host call failing log one line naming it and the cause; the passes
    succeed; once it works again a `recovered` line, and a new failure is warned of anew."""
    async with relay_env(store) as env:
        await env.pair()
        running(env, "s1")
        with monkeypatch.context() as patch:
            patch.setattr(env.host, kind, broken)
            for _ in range(3):
                assert await env.publish() is None
        (warning,) = lines(env, f"Host {kind} failed")
        assert warning.startswith(f"[relay] Host {kind} failed (OSError: disk gone); ")
        assert await env.publish() is None
        assert lines(env, f"[relay] Host {kind} recovered")
        monkeypatch.setattr(env.host, kind, broken)
        assert await env.publish() is None
        assert len(lines(env, f"[relay] Host {kind} failed (OSError: disk gone)")) == 2


async def test_a_session_whose_meta_fails_is_left_out_and_warned_of_once(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One session's unreadable meta leaves it out of every snapshot while the others publish;
    its failure is warned of once, though other sessions' metas succeed each pass."""
    async with relay_env(store) as env:
        await env.pair()
        running(env, "good")
        running(env, "bad")
        readable = env.host.session_meta

        async def meta(session_id: str) -> object:
            if session_id == "bad":
                raise ValueError("unreadable row")
            return await readable(session_id)

        monkeypatch.setattr(env.host, "session_meta", meta)
        for _ in range(3):
            assert await env.publish() is None
        shown = [row.session_id for row in env.relay.rows(*await publisher_scope(env))]
        assert shown == ["good"]
        assert len(lines(env, "Host session_meta failed (ValueError: unreadable row)")) == 1
        assert not lines(env, "recovered")


async def publisher_scope(env: Env) -> tuple[str, str]:
    config = await env.config()
    return config.publisher_id, config.profiles["default"].profile_id


async def test_a_bug_in_a_pass_is_logged_with_its_traceback_and_backs_off(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A `TypeError` from a host call no pass survives backs off 5 s, logs `failed` with the
    exception's type and an ERROR record with its traceback; the next pass recovers."""
    async with relay_env(store) as env:
        await env.pair()
        env.logs.clear()
        caplog.set_level(logging.INFO, logger="relay")
        with monkeypatch.context() as patch:
            patch.setattr(env.host, "active_runs", bug)
            assert await env.publish() == 5.0
            assert await env.publish() == 10.0
        assert await env.publish() is None
        assert env.logs == [
            "[relay] Talaria relay snapshot failed (TypeError: unsupported operand); "
            "retrying in 5.0s",
            "[relay] Talaria relay snapshot still failing (TypeError: unsupported operand); "
            "retrying in 10.0s",
            "[relay] Talaria relay snapshot recovered",
        ]
        records = [r for r in caplog.records if r.name == "relay.publisher"]
        assert [r.levelno for r in records] == [logging.ERROR, logging.ERROR]
        assert all(r.exc_info and r.exc_info[0] is TypeError for r in records)
        assert "Traceback" in caplog.text
        assert not any("Traceback" in line for line in env.logs)


async def test_the_background_loop_outlives_a_bug(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background publisher whose passes hit a bug keeps retrying, and publishes once fixed."""
    async with relay_env(store) as env:
        await env.pair()
        calls = 0
        retried, recovered = asyncio.Event(), asyncio.Event()

        async def flaky() -> Sequence[ActiveRun]:
            nonlocal calls
            calls += 1
            if calls == 3:
                retried.set()
            raise TypeError("unsupported operand")

        def log(line: str) -> None:
            env.logs.append(line)
            if line.endswith("snapshot recovered"):
                recovered.set()

        monkeypatch.setattr(env.host, "active_runs", flaky)
        service = RelayService(
            env.store,
            env.host,
            relay_url=RELAY_URL,
            http=env.http,
            clock=env.clock,
            log=log,
            publishing=PublisherOptions(uniform=lambda _low, _high: 0.001),
        )
        assert await service.start()
        try:
            service.changed()
            await asyncio.wait_for(retried.wait(), 5)
            monkeypatch.undo()
            await asyncio.wait_for(recovered.wait(), 5)
        finally:
            await service.stop()
        assert len(lines(env, "(TypeError: unsupported operand)")) >= 3


async def test_without_a_log_callable_lines_reach_the_relay_logger_with_levels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no `log` callable, a swallowed failure is one WARNING on `relay.publisher`, its
    recovery INFO; a bug's line is ERROR with its traceback."""
    caplog.set_level(logging.INFO, logger="relay")
    report = Reporter(None, logging.getLogger("relay.publisher"))
    swallowed = Swallowed(report)
    none: list[str] = []
    for _ in range(3):
        assert await swallowed.call("session_index", broken, none, "announcing less") == []
        swallowed.settle()

    async def works() -> list[str]:
        return ["row"]

    assert await swallowed.call("session_index", works, none, "announcing less") == ["row"]
    swallowed.settle()
    try:
        raise TypeError("bad")
    except TypeError as error:
        report.error("[relay] broken", {}, error=error)
    got = [(r.name, r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert got == [
        (
            "relay.publisher",
            logging.WARNING,
            "[relay] Host session_index failed (OSError: disk gone); announcing less",
            False,
        ),
        ("relay.publisher", logging.INFO, "[relay] Host session_index recovered", False),
        ("relay.publisher", logging.ERROR, "[relay] broken", True),
    ]
