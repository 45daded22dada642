"""Traces through the OpenTelemetry API, read back with the SDK's in-memory exporter.

`relay.tracing.use(provider)` points the library at a test's own provider: the global one can be
set only once per process. Without an SDK no span is made.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from backends import MEMORY, on
from harness import relay_env
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from relay import tracing
from relay.store import RelayStore


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    tracing.use(provider)
    try:
        yield found
    finally:
        tracing.use(None)
        provider.shutdown()


def passes(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == "relay.pass"]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        span
        for span in exporter.get_finished_spans()
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]


@on(MEMORY, "sqlite")
async def test_a_pass_is_a_span_with_its_store_calls_and_puts_as_children(
    store: RelayStore, backend: str, exporter: InMemorySpanExporter
) -> None:
    """A pass publishing one profile is `relay.pass` (profiles 1, states 1, outcome ok) whose
    children are its store calls (`relay.store pass_view`, …, naming the backend) and one HTTP
    client span `PUT` with the semantic conventions' attributes and status 200."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("s1")
        env.host.start_run("s1")
        exporter.clear()
        assert await env.publish() is None
        (one,) = passes(exporter)
        assert one.attributes is not None
        assert one.attributes["relay.outcome"] == "ok"
        assert one.attributes["relay.profiles"] == 1
        assert one.attributes["relay.states"] == 1
        assert one.status.status_code is StatusCode.UNSET
        below = children(exporter, one)
        stores = [span for span in below if span.name.startswith("relay.store ")]
        assert "relay.store pass_view" in {span.name for span in stores}
        assert all(
            span.attributes is not None and span.attributes["relay.store.backend"] == backend
            for span in stores
        )
        puts = [span for span in below if span.name == "PUT"]
        assert len(puts) >= 1
        put = puts[0]
        assert put.kind is SpanKind.CLIENT
        assert put.attributes is not None
        assert put.attributes["http.request.method"] == "PUT"
        assert put.attributes["http.response.status_code"] == 200
        assert put.attributes["server.address"] == "relay.example"
        assert put.attributes["server.port"] == 443
        assert str(put.attributes["url.full"]).startswith("https://relay.example/")


@on(MEMORY)
async def test_a_failed_pass_says_why_and_when_it_retries(
    store: RelayStore, exporter: InMemorySpanExporter
) -> None:
    """A 503 makes the PUT span an error with `error.type` 503, and the pass span an error with
    outcome `backoff` and `relay.retry_in` the backoff's seconds."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("s1")
        env.host.start_run("s1")
        env.relay.inject("snapshot", 503)
        exporter.clear()
        assert await env.publish() == 5.0
        (one,) = passes(exporter)
        assert one.attributes is not None
        assert one.attributes["relay.outcome"] == "backoff"
        assert one.attributes["relay.retry_in"] == 5.0
        assert one.attributes["error.type"] == "RelayHttpError"
        assert one.status.status_code is StatusCode.ERROR
        (put,) = [span for span in children(exporter, one) if span.name == "PUT"]
        assert put.attributes is not None
        assert put.attributes["http.response.status_code"] == 503
        assert put.attributes["error.type"] == "503"
        assert put.status.status_code is StatusCode.ERROR


@on(MEMORY)
async def test_a_transport_failure_is_named_by_its_kind(
    store: RelayStore, exporter: InMemorySpanExporter
) -> None:
    """A PUT that never got an answer has no status code and `error.type` its error's class."""
    async with relay_env(store) as env:
        await env.pair()
        env.host.create_session("s1")
        env.host.start_run("s1")
        env.wire.fail("snapshot", httpx.ConnectError)
        exporter.clear()
        assert await env.publish() == 5.0
        (put,) = [span for span in exporter.get_finished_spans() if span.name == "PUT"]
        assert put.attributes is not None
        assert "http.response.status_code" not in put.attributes
        assert put.attributes["error.type"] == "RelayUnreachableError"


def test_without_an_sdk_no_tracer_is_handed_out() -> None:
    """While the global provider is the API's default, `current()` is None."""
    assert tracing.current() is None
    with tracing.pass_span() as span:
        assert span is None


GLOBAL_SDK_LATER = """
import asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from relay import tracing
from relay.store import open_store

async def main() -> None:
    async with open_store("memory://") as store:
        await store.revision_floor()
        assert tracing.current() is None
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        await store.revision_floor()
        print([span.name for span in exporter.get_finished_spans()])

asyncio.run(main())
"""


def test_an_sdk_installed_globally_after_the_store_opened_is_picked_up() -> None:
    """In a fresh process: no span before `set_tracer_provider`, one for the next store call."""
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_SDK_LATER],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['relay.store revision_floor']"
