"""The browser-facing routes, once, for every face: `relay.asgi` (async) and `relay.wsgi` (sync).

Each route is a generator that says what it needs as effects it yields (who calls, the body, a
service call) and returns `(status, json body)`. A face performs the effects its own way (awaiting
them, or calling the blocking facade) and throws their errors back in, so statuses, limits, the
content-type rule and the `{"error": …}` bodies are decided here alone (the manual's table of
them: docs/web-hosts.md, "The browser routes"). The operator routes answer only a caller that
the app's `operator` predicate accepts (without one, nobody), and every answer of theirs carries
`relay.operator.page.HEADERS`: a strict CSP, nosniff, no-store, no referrer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from relay.errors import (
    CorruptStateError,
    InvalidInputError,
    RelayError,
    RelayPairingError,
    RelayRequestError,
    ServiceNotStartedError,
    SessionNotFoundError,
    StaleConfigError,
    StoreError,
)
from relay.health import Health
from relay.logfields import of_error
from relay.operator import page
from relay.store import checks

logger = logging.getLogger("relay.routes")

# The largest pairing request is four short strings (an invitation is at most 256 characters):
# 64 KiB is far above any honest body and keeps a hostile one from costing memory or parse time.
MAX_BODY = 64 * 1024
DEFAULT_PREFIX = "/api/talaria"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the profile it acts for, and whether it may manage the server."""

    profile: str
    operator: bool = False

    def __post_init__(self) -> None:
        # A wrong type here is the app's bug: fail where it is made, not as a client's 400.
        if type(self.profile) is not str or type(self.operator) is not bool:
            raise TypeError("Caller(profile: str, operator: bool)")


class Refused(RelayError):
    """Not authorized."""

    def __init__(self, message: str | None = None, status: int = 401) -> None:
        super().__init__(message)
        if not 400 <= status <= 499:
            raise InvalidInputError("a refusal's status must be a 4xx")
        self.status = status


class Answer(Exception):
    """Stop handling a request and answer `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class WhoCalls:
    """Ask the app's `identify` hook who calls: a `Caller` or None."""


@dataclass(frozen=True, slots=True)
class ReadBody:
    """The raw body, no longer than `limit` (longer: raise `Answer(413)`; cut short: 400)."""

    limit: int


@dataclass(frozen=True, slots=True)
class Call:
    """Call the service's method `name` (awaited by the async face, blocking in the sync one)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Document:
    """An answer that is not the routes' plain JSON: its bytes, media type and headers."""

    body: bytes
    media_type: str
    headers: tuple[tuple[str, str], ...] = ()


Effect: TypeAlias = WhoCalls | ReadBody | Call
Reply: TypeAlias = tuple[int, dict[str, Any] | Document]
# The app's operator predicate: whether an identified caller may read the operator page.
Operator: TypeAlias = Callable[[Caller], bool]
NO_PREDICATE = (
    "No operator may read this page: the app gave the relay routes no operator= predicate "
    "(pass operator=lambda caller: ... to routes(), app() or middleware())"
)
Flow: TypeAlias = Generator[Effect, Any, Reply]


@dataclass(frozen=True, slots=True)
class Asked:
    """One request as a face hands it to a flow; `headers` have lowercase names."""

    started: bool
    headers: Mapping[str, str]
    max_body: int
    operator: Operator | None


@dataclass(frozen=True, slots=True)
class Route:
    """One route: its method, its path under the prefix, and its flow."""

    method: str
    path: str
    flow: Callable[[Asked], Flow]
    # The operator routes: every answer, refusals included, carries the page's headers.
    secured: bool = False

    def wrong_method(self) -> Reply:
        """Any other method's answer, HEAD's too: 405 with `Allow` and a JSON body, as refusals."""
        headers = (("Allow", self.method), *(page.HEADERS if self.secured else ()))
        return 405, Document(encode({"error": "Method not allowed"}), "application/json", headers)


def check_options(prefix: str, max_body: int) -> None:
    """A bad prefix or body cap fails where the app makes the routes, not per request."""
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise InvalidInputError("prefix must be empty, or start with / and not end with /")
    if type(max_body) is not int or max_body < 1:
        raise InvalidInputError("max_body must be a positive number of bytes")


def encode(payload: dict[str, Any]) -> bytes:
    """JSON that is always encodable: ASCII escapes, so a lone surrogate echoed back is no 500."""
    return json.dumps(payload, ensure_ascii=True, allow_nan=False).encode("ascii")


def _guarded(action: Callable[[object, Caller], Call]) -> Callable[[Asked], Flow]:
    """A route that needs a started service, a caller and a JSON body, with its errors mapped:
    the service's answer, or `{"ok": true}` for a call that answers nothing."""

    def flow(asked: Asked) -> Flow:
        try:
            caller = yield from _caller(asked.started)
            body = yield from _read_json(asked.headers, asked.max_body)
            result = yield action(body, caller)
        except (Answer, RelayError) as error:
            return _error_body(error)
        return 200, {"ok": True} if result is None else result

    return flow


def _caller(started: bool) -> Generator[Effect, Any, Caller]:
    """Who calls, asked before the body: a stranger costs no parsing."""
    if not started:
        raise Answer(503, "Talaria relay is not started")
    caller = yield WhoCalls()
    if caller is None:
        raise Refused()
    if not isinstance(caller, Caller):
        raise TypeError(f"identify must return a Caller or None, not {caller!r}")
    return caller


def _pair(body: object, caller: Caller) -> Call:
    # A non-object body is the service's own 400 ("Invalid pairing request").
    return Call("pair", (body, caller.profile), {"operator": caller.operator})


def _viewed(body: object, caller: Caller) -> Call:
    session_id = body.get("session_id") if isinstance(body, dict) else None
    # Checked here too: without a publisher the service ignores the id unread.
    if type(session_id) is not str:
        raise Answer(400, "Invalid viewed request")
    return Call("mark_viewed", (checks.text("session_id", session_id),))


def _health(asked: Asked) -> Flow:
    """Ready when the store answers; it needs no caller, so a load balancer can ask."""
    if not asked.started:
        return 503, {"ok": False, "error": "Talaria relay is not started"}
    found: Health = yield Call("health")
    # Serving needs the store, at head; an unregistered server or a publisher in backoff
    # still serves its pages, so neither takes it out of the load balancer.
    if not found.store_reachable or found.schema_at_head is False:
        return 503, {"ok": False, "error": "The relay store is unavailable"}
    return 200, {"ok": True}


def _operator(html: bool) -> Callable[[Asked], Flow]:
    """The operator page (`html`) or its JSON twin: read-only, for operators only."""

    def flow(asked: Asked) -> Flow:
        try:
            caller = yield from _caller(asked.started)
            if asked.operator is None:
                raise Refused(NO_PREDICATE, 403)
            # Only `True` lets in: a truthy answer that is not is the app's slip, not a yes.
            if asked.operator(caller) is not True:
                raise Refused("Only an operator may read this page", 403)
            document = yield Call("operator_facts")
        except (Answer, RelayError) as error:
            return _secured(*_error_body(error))
        if html:
            body = page.render(document).encode("utf-8")
            return 200, Document(body, "text/html; charset=utf-8", page.HEADERS)
        return _secured(200, document)

    return flow


def _error_body(error: Answer | RelayError) -> tuple[int, dict[str, Any]]:
    status, message = (error.status, str(error)) if isinstance(error, Answer) else status_of(error)
    return status, {"error": message}


def _secured(status: int, payload: dict[str, Any]) -> Reply:
    return status, Document(encode(payload), "application/json", page.HEADERS)


ROUTES: tuple[Route, ...] = (
    Route("POST", "/relay/pair", _guarded(_pair)),
    Route("POST", "/presence", _guarded(lambda b, c: Call("update_presence", (b, c.profile)))),
    Route("POST", "/viewed", _guarded(_viewed)),
    Route("GET", "/relay/health", _health),
    Route("GET", "/relay/operator", _operator(html=True), secured=True),
    Route("GET", "/relay/operator.json", _operator(html=False), secured=True),
)


def status_of(error: RelayError) -> tuple[int, str]:
    """The answer for an error of the `relay.errors` tree."""
    if isinstance(error, ServiceNotStartedError):
        return 503, "Talaria relay is not started"
    if isinstance(error, RelayPairingError | Refused):
        return error.status, str(error)
    if isinstance(error, SessionNotFoundError):
        return 404, "Session not found"
    if isinstance(error, InvalidInputError):
        return 400, str(error)
    if isinstance(error, StaleConfigError):
        return 409, "The relay registration changed meanwhile; try again"
    if isinstance(error, CorruptStateError):
        # Not the client's doing: a stored value is broken. Its details go to the log only.
        facts = of_error("stored_state_invalid", error)
        logger.error("[relay] stored relay state is invalid: %s", error, extra=facts)
        return 500, "Stored relay state is invalid"
    if isinstance(error, StoreError):
        facts = of_error("store_unavailable", error)
        logger.warning("[relay] the store did not answer: %s", error, extra=facts)
        return 503, "The relay store is unavailable"
    if isinstance(error, RelayRequestError):
        return 502, "Could not reach Talaria Relay"
    logger.error("[relay] request failed: %s", error, extra=of_error("request_failed", error))
    return 500, "Talaria relay request failed"


def _read_json(headers: Mapping[str, str], limit: int) -> Generator[Effect, Any, object]:
    """The body as JSON, read no further than `limit` bytes."""
    if headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
        raise Answer(415, "Content-Type must be application/json")
    declared = headers.get("content-length")
    if declared is not None:
        # ASCII digits only: no sign, no spaces, no "١٢" or "²" (`isdigit` alone takes both).
        if not (declared.isascii() and declared.isdigit()):
            raise Answer(400, "Invalid Content-Length")
        if int(declared) > limit:
            raise Answer(413, "Request body too large")
    body: bytes = yield ReadBody(limit)
    try:
        return json.loads(body, parse_constant=_no_constant)
    # ValueError: not JSON, not UTF-8, an integer over 4300 digits; RecursionError: "[[[[…".
    except (ValueError, RecursionError) as error:
        raise Answer(400, "Invalid JSON body") from error


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def rendered(reply: Reply) -> tuple[int, Document]:
    """A reply as bytes to send: a plain JSON body becomes its `Document`."""
    status, payload = reply
    if isinstance(payload, Document):
        return status, payload
    return status, Document(encode(payload), "application/json")


def performer(
    service: Any, who: Callable[[], Any], read: Callable[[int], Any]
) -> Callable[[Effect], Any]:
    """How a face performs effects: `who()` asks its `identify`, `read(limit)` reads the body,
    a `Call` goes to `service`; in the async face all three answer awaitables."""

    def perform(effect: Effect) -> Any:
        if isinstance(effect, WhoCalls):
            return who()
        if isinstance(effect, ReadBody):
            return read(effect.limit)
        assert service is not None
        return getattr(service, effect.name)(*effect.args, **effect.kwargs)

    return perform


def drive(flow: Flow, perform: Callable[[Effect], Any]) -> Reply:
    """Run `flow`, performing each effect with a blocking `perform`."""
    value, error = None, None
    try:
        while True:
            step = flow.send(value) if error is None else flow.throw(error)
            try:
                value, error = perform(step), None
            except Exception as raised:  # thrown back in: the flow maps what it knows
                value, error = None, raised
    except StopIteration as stop:
        reply: Reply = stop.value
        return reply


async def drive_async(flow: Flow, perform: Callable[[Effect], Awaitable[Any]]) -> Reply:
    """Run `flow`, awaiting each effect's `perform`."""
    value, error = None, None
    try:
        while True:
            step = flow.send(value) if error is None else flow.throw(error)
            try:
                value, error = await perform(step), None
            except Exception as raised:  # thrown back in: the flow maps what it knows
                value, error = None, raised
    except StopIteration as stop:
        reply: Reply = stop.value
        return reply
