"""Metrics through the OpenTelemetry API, read back with the SDK's in-memory reader.

`relay.metrics.use(provider)` points the library at a test's own provider: the global one can be
set only once per process. Without an SDK nothing is recorded (and nothing is allocated).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from backends import MEMORY, on
from harness import relay_env
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from relay import metrics
from relay.store import RelayStore
from relay.store.store import Store

Points = dict[str, list[tuple[dict[str, Any], float]]]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    metrics.use(provider)
    try:
        yield found
    finally:
        metrics.use(None)
        provider.shutdown()


def points(reader: InMemoryMetricReader) -> Points:
    """Each metric's data points: attributes and value (a histogram's count)."""
    found: Points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "talaria-relay"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, NumberDataPoint):
                        value: float = point.value
                    else:
                        value = point.count
                    found.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return found


def total(found: Points, name: str, **attributes: str) -> float:
    return sum(v for attrs, v in found.get(name, []) if attrs.items() >= attributes.items())


@on(MEMORY)
async def test_a_pass_that_succeeds_then_one_that_fails_are_counted(
    store: RelayStore, reader: InMemoryMetricReader
) -> None:
    """Sent snapshots and announcements count as `sent` with status 200, a 503 snapshot as
    `failed` with status 503; both passes are timed; the failure turns the backoff gauge on and
    a later success off; the backlog gauges are reported."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("s1")
        env.host.start_run("s1")
        assert await env.publish() is None
        env.clock.advance(10)
        env.host.create_session("s-new")
        assert await env.publish() is None
        found = points(reader)
        assert total(found, "relay.snapshots", outcome="sent", status="200") >= 2
        assert total(found, "relay.announcements", outcome="sent", status="200") >= 1
        assert total(found, "relay.outbox.depth") == 0
        assert "relay.ledger.unsent" in found

        env.relay.inject("snapshot", 503)
        assert await env.publish() == 5.0
        found = points(reader)
        assert total(found, "relay.snapshots", outcome="failed", status="503") == 1
        assert total(found, "relay.backoff.active") == 1
        assert total(found, "relay.pass.duration", outcome="failed") == 1
        assert total(found, "relay.pass.duration", outcome="ok") >= 2

        await env.service.mark_viewed("s1")
        assert await env.publish() is None
        found = points(reader)
        assert total(found, "relay.acknowledgements", outcome="sent", status="200") == 1
        assert total(found, "relay.backoff.active") == 0


@on(MEMORY)
async def test_a_transport_failure_is_counted_by_its_kind(
    store: RelayStore, reader: InMemoryMetricReader
) -> None:
    """A snapshot that never got an answer is `failed` with the transport error's kind."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("s1")
        env.host.start_run("s1")
        env.wire.fail("snapshot", httpx.ConnectError)
        assert await env.publish() == 5.0
        found = points(reader)
        failed = [a for a, _ in found["relay.snapshots"] if a["outcome"] == "failed"]
        assert failed == [{"outcome": "failed", "status": "RelayUnreachableError"}]


async def test_every_store_method_is_timed_by_method_and_backend(
    store: RelayStore, backend: str, reader: InMemoryMetricReader
) -> None:
    """`relay.store.transaction.duration` has a point per method called, naming the backend."""
    await store.revision_floor()
    await store.load_config()
    await store.allocate_revisions(2, 1_800_000_000_000)
    found = points(reader)
    timed = {
        (attrs["method"], attrs["backend"]): count
        for attrs, count in found["relay.store.transaction.duration"]
    }
    for method in ("revision_floor", "load_config", "allocate_revisions"):
        assert timed[(method, backend)] == 1


def test_without_an_sdk_nothing_is_recorded_and_calls_pass_straight_through() -> None:
    """While the global provider is the API's default, `current()` is None and a store method's
    wrapper hands back the method's own coroutine (no timing frame)."""
    assert metrics.current() is None
    method = Store.revision_floor
    assert method.__wrapped__.__name__ == "revision_floor"  # type: ignore[attr-defined]


GLOBAL_SDK_LATER = """
import asyncio
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from relay import metrics as relay_metrics
from relay.store import open_store

async def main() -> None:
    async with open_store("memory://") as store:
        await store.revision_floor()
        assert relay_metrics.current() is None
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        await store.revision_floor()
        data = reader.get_metrics_data()
        (metric,) = data.resource_metrics[0].scope_metrics[0].metrics
        (point,) = metric.data.data_points
        print(metric.name, dict(point.attributes), point.count)

asyncio.run(main())
"""


def test_an_sdk_installed_globally_after_the_store_opened_is_picked_up() -> None:
    """In a fresh process: nothing is recorded before `set_meter_provider`, the next call is."""
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_SDK_LATER],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "relay.store.transaction.duration {'method': 'revision_floor', 'backend': 'memory'} 1"
    )
