"""Every `[relay]` line carries its facts as `extra` fields, so a JSON formatter emits them.

A handler on the `relay` logger keeps the records; the tests read the attributes the library
put on them (`relay_event`, `relay_profile`, `relay_status`, `relay_failure`, `relay_retry_in`,
`relay_owner`, `relay_kind`), and python-json-logger's formatter, as docs/observability.md shows
it, turns them into JSON fields.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from backends import MEMORY, on
from harness import RELAY_URL, Env, relay_env
from pythonjsonlogger.json import JsonFormatter

from relay import PublisherOptions
from relay.errors import StoreUnavailableError
from relay.routes import status_of
from relay.service import RelayService
from relay.store import RelayStore

pytestmark = on(MEMORY)


class Kept(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, event: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "relay_event", None) == event]


@pytest.fixture
def kept() -> Iterator[Kept]:
    handler = Kept()
    logger = logging.getLogger("relay")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for record in handler.records:  # every line the runs logged carries its event
            if record.getMessage().startswith("[relay]"):
                assert getattr(record, "relay_event", None), record.getMessage()


@pytest.fixture
async def env(store: RelayStore) -> AsyncIterator[Env]:
    """The harness's env, with a service that logs to `logging` (no `log` callable)."""
    async with relay_env(store) as found:
        await found.service.stop()
        found.service = RelayService(
            store,
            found.host,
            relay_url=RELAY_URL,
            http=found.http,
            clock=found.clock,
            owner="web-1",
            publishing=PublisherOptions(background=False, uniform=lambda low, high: 1.0),
        )
        await found.service.start()  # a service is started before use (ServiceNotStartedError)
        yield found


async def test_a_failed_pass_names_status_failure_retry_and_owner(env: Env, kept: Kept) -> None:
    """A 503 snapshot logs `snapshot_failed` with status 503, the failure's class, `retry_in`
    5.0 and this replica's owner; the next good pass logs `snapshot_recovered`, same owner."""
    await env.pair()
    env.host.create_session("s1")
    env.host.start_run("s1")
    env.relay.inject("snapshot", 503)
    assert await env.publish() == 5.0
    (failed,) = kept.events("snapshot_failed")
    assert failed.getMessage().startswith("[relay] Talaria relay snapshot failed")
    assert failed.levelno == logging.WARNING
    assert failed.relay_status == 503  # type: ignore[attr-defined]
    assert failed.relay_failure == "RelayHttpError"  # type: ignore[attr-defined]
    assert failed.relay_retry_in == 5.0  # type: ignore[attr-defined]
    assert failed.relay_profile == "default"  # type: ignore[attr-defined]
    owner = failed.relay_owner  # type: ignore[attr-defined]
    assert owner.startswith("web-1/")
    assert await env.publish() is None
    (recovered,) = kept.events("snapshot_recovered")
    assert recovered.relay_owner == owner  # type: ignore[attr-defined]


async def test_a_permanent_refusal_names_the_disabled_profile(env: Env, kept: Kept) -> None:
    """A 403 snapshot disables its profile: `profile_disabled` with the profile and status."""
    await env.pair()
    env.host.create_session("s1")
    env.host.start_run("s1")
    env.relay.inject("snapshot", 403)
    await env.publish()
    (disabled,) = kept.events("profile_disabled")
    assert disabled.levelno == logging.ERROR
    assert disabled.relay_profile == "default"  # type: ignore[attr-defined]
    assert disabled.relay_status == 403  # type: ignore[attr-defined]


async def _raises(*_args: object) -> list[str]:
    raise OSError("disk gone")


async def _lazy(*_args: object) -> Iterator[object]:
    """An answer that raises only as it is read."""

    def rows() -> Iterator[object]:
        raise OSError("index torn")
        yield  # a generator

    return rows()


@pytest.mark.parametrize(
    ("kind", "answer"),
    [("session_index", _raises), ("agent_sessions", _lazy)],
    ids=["raises", "lazy"],
)
async def test_a_failing_host_call_names_its_kind(
    env: Env,
    kept: Kept,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    answer: Callable[..., Awaitable[object]],
) -> None:
    """A host call the pass survives logs `host_call_failed` with its kind and failure class,
    whether the call raises or answers a lazy sequence that raises as it is read."""
    await env.pair()
    env.host.create_session("s1")
    env.host.start_run("s1")
    monkeypatch.setattr(env.host, kind, answer)
    assert await env.publish() is None
    (failed,) = kept.events("host_call_failed")
    assert failed.relay_kind == kind  # type: ignore[attr-defined]
    assert failed.relay_failure == "OSError"  # type: ignore[attr-defined]


def test_a_route_whose_store_is_down_logs_store_unavailable(kept: Kept) -> None:
    """The routes' 503 for a store that does not answer logs `store_unavailable`."""
    assert status_of(StoreUnavailableError("down"))[0] == 503
    (line,) = kept.events("store_unavailable")
    assert line.relay_failure == "StoreUnavailableError"  # type: ignore[attr-defined]


async def test_python_json_logger_emits_the_facts_as_fields(env: Env, kept: Kept) -> None:
    """The docs' recipe: `JsonFormatter` turns a `snapshot_failed` line into JSON whose fields
    include `relay_status`, `relay_retry_in` and `relay_owner`, and no field holds a key."""
    await env.pair()
    env.host.create_session("s1")
    env.host.start_run("s1")
    env.relay.inject("snapshot", 503)
    assert await env.publish() == 5.0
    (failed,) = kept.events("snapshot_failed")
    emitted = json.loads(JsonFormatter("%(levelname)s %(name)s %(message)s").format(failed))
    assert emitted["relay_event"] == "snapshot_failed"
    assert emitted["relay_status"] == 503
    assert emitted["relay_retry_in"] == 5.0
    assert emitted["relay_owner"].startswith("web-1/")
    assert emitted["name"] == "relay.publisher"
    assert "PRIVATE KEY" not in json.dumps(emitted)
