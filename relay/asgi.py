"""The browser-facing routes of the Talaria Web server, ready to mount in Starlette or FastAPI.

    from relay.asgi import Caller, routes

    async def identify(request: Request) -> Caller | None:   # the web app's own auth
        user = await my_session(request)
        return None if user is None else Caller(user.profile, operator=user.is_owner)

    app.router.routes.extend(routes(service, identify))   # or: app.mount("/api/talaria", app(…))

| route | answers |
| --- | --- |
| `POST /api/talaria/relay/pair` | 200 `{"ok": true, "publisher_id"}`; `RelayPairingError.status` |
| `POST /api/talaria/presence` | 200 `{"ok": true, "lease_seconds"}` (90, 0 on revoke); 400; 403 |
| `POST /api/talaria/viewed` | 200 `{"ok": true}`; 400; 404 for an unknown session |
| `GET /api/talaria/relay/health` | 200 `{"ok": true}` when the store answers; 503 when not |

Every error is `{"error": message}`, as upstream's `bad(handler, message, status)`. Whatever a
client sends, the answer is never 500: a body over `max_body` is 413, one that is not JSON 400, a
`Content-Type` other than JSON 415 (a cross-site form cannot send JSON without a preflight), a
caller `identify` refuses 401 (or the `Refused` status it raises), a store that cannot be reached
503. Starlette is an optional extra: only importing this module needs it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

try:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route
except ImportError as error:  # pragma: no cover - exercised in a subprocess without the extra
    raise ImportError(
        "relay.asgi needs Starlette, an optional extra: pip install 'talaria-relay[web]'"
    ) from error

from relay.errors import (
    CorruptStateError,
    InvalidInputError,
    RelayError,
    RelayPairingError,
    RelayRequestError,
    SessionNotFoundError,
    StaleConfigError,
    StoreError,
)
from relay.service import RelayService
from relay.store import checks

logger = logging.getLogger("relay.asgi")

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


# The web app's auth: a `Caller`, or None (401), or raise `Refused(message, status)`.
Identify: TypeAlias = Callable[[Request], Awaitable[Caller | None]]
# A service, or a function that returns it once the app has started (None before: 503).
ServiceSource: TypeAlias = RelayService | Callable[[], RelayService | None]


class _Answer(Exception):
    """Stop handling a request and answer `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Json(Response):
    """JSON that is always encodable: ASCII escapes, so a lone surrogate echoed back is no 500."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False).encode("ascii")


def routes(
    service: ServiceSource,
    identify: Identify,
    *,
    prefix: str = DEFAULT_PREFIX,
    max_body: int = MAX_BODY,
) -> list[Route]:
    """The routes under `prefix` (`""` to mount them): add them to a Starlette or FastAPI app."""
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise InvalidInputError("prefix must be empty, or start with / and not end with /")
    if type(max_body) is not int or max_body < 1:
        raise InvalidInputError("max_body must be a positive number of bytes")
    api = _Routes(service, identify, max_body)
    return [
        Route(f"{prefix}/relay/pair", api.pair, methods=["POST"]),
        Route(f"{prefix}/presence", api.presence, methods=["POST"]),
        Route(f"{prefix}/viewed", api.viewed, methods=["POST"]),
        Route(f"{prefix}/relay/health", api.health, methods=["GET"]),
    ]


def app(service: ServiceSource, identify: Identify, *, max_body: int = MAX_BODY) -> Starlette:
    """The routes as an app of their own, to mount at `/api/talaria`."""
    return Starlette(routes=routes(service, identify, prefix="", max_body=max_body))


class _Routes:
    def __init__(self, service: ServiceSource, identify: Identify, max_body: int) -> None:
        self._source = service
        self._identify = identify
        self._max_body = max_body

    async def pair(self, request: Request) -> Response:
        async def action(service: RelayService, body: object, caller: Caller) -> dict[str, Any]:
            # A non-object body is the service's own 400 ("Invalid pairing request").
            return await service.pair(body, caller.profile, operator=caller.operator)

        return await self._handle(request, action)

    async def presence(self, request: Request) -> Response:
        async def action(service: RelayService, body: object, caller: Caller) -> dict[str, Any]:
            return await service.update_presence(body, caller.profile)

        return await self._handle(request, action)

    async def viewed(self, request: Request) -> Response:
        async def action(service: RelayService, body: object, caller: Caller) -> dict[str, Any]:
            session_id = body.get("session_id") if isinstance(body, dict) else None
            # Checked here too: without a publisher the service ignores the id unread.
            if type(session_id) is not str:
                raise _Answer(400, "Invalid viewed request")
            await service.mark_viewed(checks.text("session_id", session_id))
            return {"ok": True}

        return await self._handle(request, action)

    async def health(self, request: Request) -> Response:
        """Ready when the store answers; it needs no caller, so a load balancer can ask."""
        service = self._service_or_none()
        if service is None:
            return _Json({"ok": False, "error": "Talaria relay is not started"}, 503)
        found = await service.health()
        # Serving needs the store, at head; an unregistered server or a publisher in backoff
        # still serves its pages, so neither takes it out of the load balancer.
        if not found.store_reachable or found.schema_at_head is False:
            return _Json({"ok": False, "error": "The relay store is unavailable"}, 503)
        return _Json({"ok": True}, 200)

    async def _handle(
        self,
        request: Request,
        action: Callable[[RelayService, object, Caller], Awaitable[dict[str, Any]]],
    ) -> Response:
        try:
            service = self._service_or_none()
            if service is None:
                raise _Answer(503, "Talaria relay is not started")
            # Who asks comes before the body: a stranger costs no parsing.
            caller = await self._identify(request)
            if caller is None:
                raise Refused()
            if not isinstance(caller, Caller):
                raise TypeError(f"identify must return a Caller or None, not {caller!r}")
            body = await _read_json(request, self._max_body)
            return _Json(await action(service, body, caller), 200)
        except _Answer as answer:
            return _Json({"error": answer.message}, answer.status)
        except RelayError as error:
            status, message = _status_of(error)
            return _Json({"error": message}, status)

    def _service_or_none(self) -> RelayService | None:
        if isinstance(self._source, RelayService):
            return self._source
        return self._source()


def _status_of(error: RelayError) -> tuple[int, str]:
    """The answer for an error of the `relay.errors` tree."""
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
        logger.error("[relay] stored relay state is invalid: %s", error)
        return 500, "Stored relay state is invalid"
    if isinstance(error, StoreError):
        logger.warning("[relay] the store did not answer: %s", error)
        return 503, "The relay store is unavailable"
    if isinstance(error, RelayRequestError):
        return 502, "Could not reach Talaria Relay"
    logger.error("[relay] request failed: %s", error)
    return 500, "Talaria relay request failed"


async def _read_json(request: Request, limit: int) -> object:
    """The body as JSON, read no further than `limit` bytes."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise _Answer(415, "Content-Type must be application/json")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():  # ASCII digits only: no sign, no spaces, no "١٢"
            raise _Answer(400, "Invalid Content-Length")
        if int(declared) > limit:
            raise _Answer(413, "Request body too large")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:  # chunked, or a Content-Length that lied
                raise _Answer(413, "Request body too large")
    except ClientDisconnect as error:
        raise _Answer(400, "Request body incomplete") from error
    try:
        return json.loads(bytes(body), parse_constant=_no_constant)
    # ValueError: not JSON, not UTF-8, an integer over 4300 digits; RecursionError: "[[[[…".
    except (ValueError, RecursionError) as error:
        raise _Answer(400, "Invalid JSON body") from error


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")
