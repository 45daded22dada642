"""The browser-facing routes of the Talaria Web server, ready to mount in Starlette or FastAPI:
`app.router.routes.extend(routes(service, identify))`, or `app.mount("/api/talaria", app(…))`,
where `identify(request)` is the web app's own auth: a `Caller`, or None (docs/web-hosts.md).

The routes themselves (statuses, limits, `{"error": …}` bodies; never a 500 for what a client
sends) are `relay.routes`, which `relay.wsgi` serves too. Starlette is an optional extra: only
importing this module needs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

try:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route
except ImportError as error:  # pragma: no cover - exercised in a subprocess without the extra
    raise ImportError(
        "relay.asgi needs Starlette, an optional extra: pip install 'talaria-relay[web]'"
    ) from error

from relay import routes as table
from relay.routes import DEFAULT_PREFIX, MAX_BODY, Caller, Operator, Refused
from relay.service import RelayService

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_BODY",
    "Caller",
    "Identify",
    "Operator",
    "Refused",
    "app",
    "routes",
]

# The web app's auth: a `Caller`, or None (401), or raise `Refused(message, status)`.
Identify: TypeAlias = Callable[[Request], Awaitable[Caller | None]]
# A service, or a function that returns it once the app has started (None before: 503).
ServiceSource: TypeAlias = RelayService | Callable[[], RelayService | None]


def routes(
    service: ServiceSource,
    identify: Identify,
    *,
    prefix: str = DEFAULT_PREFIX,
    max_body: int = MAX_BODY,
    operator: Operator | None = None,
) -> list[Route]:
    """The routes under `prefix` (`""` to mount them): add them to a Starlette or FastAPI app.
    `operator(caller)` says who may read the operator page; without it nobody may."""
    table.check_options(prefix, max_body)

    def endpoint(route: table.Route) -> Callable[[Request], Awaitable[Response]]:
        """One route of the shared table, its effects performed with Starlette and the service."""

        async def handle(request: Request) -> Response:
            if request.method != route.method:
                return _response(route.wrong_method())
            found = service if isinstance(service, RelayService) else service()
            headers = {"content-type": request.headers.get("content-type", "")}
            if (declared := request.headers.get("content-length")) is not None:
                headers["content-length"] = declared
            asked = table.Asked(found is not None, headers, max_body, operator)
            perform = table.performer(found, lambda: identify(request), lambda n: _read(request, n))
            return _response(await table.drive_async(route.flow(asked), perform))

        return handle

    return [
        Route(
            f"{prefix}{route.path}",
            endpoint(route),
            # Every method reaches the endpoint, which answers any but the route's own 405 as
            # the shared table says (Starlette's own would be plain text, and answer HEAD).
            methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        )
        for route in table.ROUTES
    ]


def app(
    service: ServiceSource,
    identify: Identify,
    *,
    max_body: int = MAX_BODY,
    operator: Operator | None = None,
) -> Starlette:
    """The routes as an app of their own, to mount at `/api/talaria` (or any prefix)."""
    found = routes(service, identify, prefix="", max_body=max_body, operator=operator)
    return Starlette(routes=found)


def _response(reply: table.Reply) -> Response:
    status, document = table.rendered(reply)
    return Response(document.body, status, dict(document.headers), document.media_type)


async def _read(request: Request, limit: int) -> bytes:
    """The body, read no further than `limit` bytes."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:  # chunked, or a Content-Length that lied
                raise table.Answer(413, "Request body too large")
    except ClientDisconnect as error:
        raise table.Answer(400, "Request body incomplete") from error
    return bytes(body)
