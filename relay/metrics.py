"""Metrics through the OpenTelemetry API: nothing is recorded until the app installs an SDK.

`opentelemetry-api` is optional (`pip install 'talaria-relay[metrics]'`); without an SDK
`current()` is None and every caller skips its measurement: the store's hot path pays one call
and no allocation. The provider is looked up at use time (`tracing.Chosen`), so an SDK installed
after the store opened is picked up. Names and attributes: docs/operating.md ("Metrics").
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

from relay import tracing
from relay.tracing import Chosen

try:
    from opentelemetry import metrics as _api
    from opentelemetry.metrics import _internal as _globals
except ImportError:  # the optional extra is not installed: every measurement is skipped
    _api = _globals = None  # type: ignore[assignment]

T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Instruments:
    """The instruments of one meter provider."""

    snapshots: Any
    announcements: Any
    acknowledgements: Any
    pass_duration: Any
    backoff_active: Any
    outbox_depth: Any
    ledger_unsent: Any
    store_duration: Any
    clock_offset: Any

    @classmethod
    def of(cls, provider: Any) -> Instruments:
        meter = provider.get_meter("talaria-relay")

        def make(kind: str, name: str, unit: str) -> Any:
            return getattr(meter, f"create_{kind}")(name, unit, _DESCRIPTIONS[name])

        return cls(
            snapshots=make("counter", "relay.snapshots", "{request}"),
            announcements=make("counter", "relay.announcements", "{request}"),
            acknowledgements=make("counter", "relay.acknowledgements", "{request}"),
            pass_duration=make("histogram", "relay.pass.duration", "s"),
            backoff_active=make("up_down_counter", "relay.backoff.active", "{publisher}"),
            outbox_depth=make("up_down_counter", "relay.outbox.depth", "{view}"),
            ledger_unsent=make("up_down_counter", "relay.ledger.unsent", "{session}"),
            store_duration=make("histogram", "relay.store.transaction.duration", "s"),
            clock_offset=make("up_down_counter", "relay.clock.offset", "ms"),
        )


_DESCRIPTIONS = {
    "relay.snapshots": "Snapshots sent to the relay, by outcome and status",
    "relay.announcements": "Session-started announcements, by outcome and status",
    "relay.acknowledgements": "Viewed acknowledgements, by outcome and status",
    "relay.pass.duration": "How long one publishing pass took",
    "relay.backoff.active": "Publishers backing off after a failure",
    "relay.outbox.depth": "Deleted sessions awaiting the relay's ack",
    "relay.ledger.unsent": "Started sessions not yet announced",
    "relay.store.transaction.duration": "One store method call, by backend",
    "relay.clock.offset": "This replica's wall clock minus the store's",
}


_CHOSEN = Chosen(
    None if _api is None else _api.get_meter_provider,
    (_globals, "_METER_PROVIDER"),
    "OTEL_PYTHON_METER_PROVIDER",
    ("NoOpMeterProvider", "_ProxyMeterProvider", "ProxyMeterProvider"),
    Instruments.of,
)
# A bound method as the module's function: the store's hot path pays one call to ask.
current = _CHOSEN.current


def use(provider: Any) -> None:
    """Record to `provider` from now on; None goes back to the global provider."""
    _CHOSEN.use(provider)


def count(instrument: str, error: BaseException | None) -> None:
    """One request to the relay: `outcome=sent|failed`, `status` (HTTP, else the failure's kind)."""
    if (found := current()) is not None:
        code = 200 if error is None else getattr(error, "status", None)
        status = str(code) if isinstance(code, int) else type(error).__name__
        outcome = "sent" if error is None else "failed"
        getattr(found, instrument).add(1, {"outcome": outcome, "status": status})


def timed(method: Callable[..., Awaitable[T]], name: str) -> Callable[..., Awaitable[T]]:
    """`method` of a store, timed into `relay.store.transaction.duration` and traced as a span
    while an SDK is in; without one, the method's own coroutine: no extra frame or allocation."""

    async def measured(
        found: Instruments | None, tracer: Any, store: Any, *args: Any, **kwargs: Any
    ) -> T:
        start = time.perf_counter()
        try:
            if tracer is None:
                return await method(store, *args, **kwargs)
            with tracing.store_span(tracer, name, store.backend_name):
                return await method(store, *args, **kwargs)
        finally:
            if found is not None:
                attributes = {"method": name, "backend": store.backend_name}
                found.store_duration.record(time.perf_counter() - start, attributes)

    @wraps(method)
    def wrapper(store: Any, *args: Any, **kwargs: Any) -> Awaitable[T]:
        found, tracer = current(), tracing.current()
        if found is None and tracer is None:
            return method(store, *args, **kwargs)
        return measured(found, tracer, store, *args, **kwargs)

    return wrapper


def timed_methods(protocol: type, *, skip: tuple[str, ...]) -> Callable[[type[C]], type[C]]:
    """A class decorator: time each coroutine method `protocol` declares, but those in `skip`."""

    def decorate(cls: type[C]) -> type[C]:
        for name in dir(protocol):
            method = getattr(cls, name, None)
            public = not name.startswith("_") and name not in skip
            if public and inspect.iscoroutinefunction(method):
                setattr(cls, name, timed(method, name))
        return cls

    return decorate


class Gauge:
    """A level one publisher contributes to an up-down counter, as changes: summed over
    publishers the counter is the process's level; `clear()` takes this one's out."""

    def __init__(self, instrument: str) -> None:
        self._instrument = instrument
        self._value = 0
        self._to: Instruments | None = None

    def set(self, value: int) -> None:
        found = current()
        if found is not None and found is not self._to:
            # A new provider starts from nothing; adding even 0 makes the level visible.
            getattr(found, self._instrument).add(value)
        elif found is not None and value != self._value:
            getattr(found, self._instrument).add(value - self._value)
        self._value, self._to = value, found

    def clear(self) -> None:
        self.set(0)
