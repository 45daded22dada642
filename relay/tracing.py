"""Traces through the OpenTelemetry API: nothing is made until the app installs an SDK.

A publishing pass is a span (`relay.pass`: profiles, states, outcome); its store calls
(`relay.store <method>`) and its requests to the relay (HTTP client spans, named by the method as
the HTTP semantic conventions say) are its children. As with `relay.metrics`, the provider is
looked up at use time (`Chosen`); without an SDK no span object is made at all. Names and
attributes: docs/observability.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

try:
    from opentelemetry import trace as _api
except ImportError:  # the optional extra is not installed: no span is made
    _api = None  # type: ignore[assignment]

T = TypeVar("T")
_LOOK_UP = object()


class Chosen(Generic[T]):
    """The provider of one signal (metrics, traces), looked up at each use: the one `use()` named,
    else the API's global one, read from the API's own attribute (`get_*_provider()` reads
    os.environ on every call) unless the environment names a provider for the API to load, or
    the API moved it. What `make` makes of a provider is made once."""

    def __init__(
        self,
        get_global: Callable[[], Any] | None,
        where: tuple[object, str],
        environment: str,
        no_sdk: tuple[str, ...],
        make: Callable[[Any], T],
    ) -> None:
        """`get_global` is None without the optional extra; `where` holds the API's global;
        `no_sdk` names the API's default providers (what they hand out records nothing)."""
        self._get_global = get_global
        self._holder, self._attribute = where
        self._from_environment = environment in os.environ
        self._no_sdk = no_sdk
        self._make = make
        self._override: Any = None
        self._provider: Any = None
        self._made: T | None = None

    def use(self, provider: Any) -> None:
        """Use `provider` from now on; None goes back to the global provider."""
        self._override = provider

    def current(self) -> T | None:
        """What the provider in use gave, or None while no SDK is installed (record nothing)."""
        if self._get_global is None:
            return None
        provider = self._override
        if provider is None:
            provider = getattr(self._holder, self._attribute, _LOOK_UP)
            if provider is None and not self._from_environment:
                return None
            if provider is None or provider is _LOOK_UP:
                provider = self._get_global()
        if provider is not self._provider:
            no_sdk = type(provider).__name__ in self._no_sdk
            self._made = None if no_sdk else self._make(provider)
            self._provider = provider
        return self._made


_CHOSEN: Chosen[Any] = Chosen(
    None if _api is None else _api.get_tracer_provider,
    (_api, "_TRACER_PROVIDER"),
    "OTEL_PYTHON_TRACER_PROVIDER",
    ("NoOpTracerProvider", "ProxyTracerProvider"),
    lambda provider: provider.get_tracer("talaria-relay"),
)
# A bound method as the module's function: a pass pays one call to ask.
current = _CHOSEN.current


def use(provider: Any) -> None:
    """Trace to `provider` from now on; None goes back to the global provider."""
    _CHOSEN.use(provider)


def annotate(
    attributes: Mapping[str, str | int | float | bool], error: Exception | None = None
) -> None:
    """Add attributes to the span in progress, if one is; with `error`, mark it failed by it."""
    if _api is None or current() is None:
        return
    span = _api.get_current_span()
    if span.is_recording():
        span.set_attributes(attributes)
        if error is not None:
            failed(span, error)


def failed(span: Any, error: BaseException, kind: str | None = None) -> None:
    """Mark `span` as failed by `error`; `kind` is its `error.type` (default: the class name)."""
    assert _api is not None
    span.set_attribute("error.type", kind or type(error).__name__)
    span.record_exception(error)
    span.set_status(_api.Status(_api.StatusCode.ERROR, type(error).__name__))


@contextlib.contextmanager
def pass_span() -> Iterator[Any]:
    """The span of one pass, current while it runs; None without an SDK."""
    tracer = current()
    if tracer is None:
        yield None
        return
    # The loop marks the outcome itself (a failed pass is caught there, not raised through).
    with tracer.start_as_current_span(
        "relay.pass", record_exception=False, set_status_on_exception=False
    ) as span:
        yield span


@contextlib.contextmanager
def store_span(tracer: Any, method: str, backend: str) -> Iterator[Any]:
    """The span of one store call, a child of the pass when a pass makes it."""
    attributes = {"relay.store.method": method, "relay.store.backend": backend}
    with tracer.start_as_current_span(
        f"relay.store {method}", attributes=attributes, record_exception=False
    ) as span:
        try:
            yield span
        except BaseException as error:
            failed(span, error)
            raise


@contextlib.contextmanager
def http_span(method: str, url: str) -> Iterator[Any]:
    """An HTTP client span (semantic conventions: `{method}`, kind CLIENT); None without an SDK.
    The caller sets `http.response.status_code` and, on a failure, `failed(span, error, kind)`."""
    tracer = current()
    if tracer is None:
        yield None
        return
    assert _api is not None
    parts = urlsplit(url)
    attributes: dict[str, str | int] = {
        "http.request.method": method,
        "url.full": url,
        "server.address": parts.hostname or "",
        "server.port": parts.port or (443 if parts.scheme == "https" else 80),
    }
    with tracer.start_as_current_span(
        method,
        kind=_api.SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span
