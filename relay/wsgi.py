"""The browser-facing routes as WSGI, over `relay.threaded.ThreadedRelayService`:
`flask_app.wsgi_app = middleware(flask_app.wsgi_app, relay, identify)` (Flask, Django, …), or
`app(relay, identify)` under a dispatcher, where `identify(environ)` is the web app's own auth:
a `Caller`, or None (docs/web-hosts.md).

The routes are those of `relay.asgi`: both serve the one table in `relay.routes`. A server
without WSGI (`http.server`) calls `Router.dispatch` from its handler. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeAlias

from relay import routes as table
from relay.routes import DEFAULT_PREFIX, MAX_BODY, Caller, Operator, Refused, Reply
from relay.threaded import ThreadedRelayService

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
else:
    StartResponse = WSGIApplication = WSGIEnvironment = Any

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_BODY",
    "Caller",
    "Identify",
    "Operator",
    "Refused",
    "Router",
    "app",
    "middleware",
]

# The web app's auth: a `Caller`, or None (401), or raise `Refused(message, status)`.
Identify: TypeAlias = Callable[[WSGIEnvironment], Caller | None]
# A service, or a function that returns it once the app has started (None before: 503).
ServiceSource: TypeAlias = ThreadedRelayService | Callable[[], ThreadedRelayService | None]
_CHUNK = 16 * 1024


@dataclass(frozen=True, slots=True)
class Router:
    """The relay routes under `prefix`; a WSGI app that hands other paths to `fallback`.
    `operator(caller)` says who may read the operator page; without it nobody may."""

    service: ServiceSource
    identify: Identify
    _: KW_ONLY
    prefix: str = DEFAULT_PREFIX
    max_body: int = MAX_BODY
    fallback: WSGIApplication | None = None
    operator: Operator | None = None
    _paths: dict[str, table.Route] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table.check_options(self.prefix, self.max_body)
        object.__setattr__(self, "_paths", {self.prefix + r.path: r for r in table.ROUTES})

    def dispatch(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        read: Callable[[int], bytes],
        who: Callable[[], Caller | None],
    ) -> Reply | None:
        """One request (`headers` with lowercase names; `read(limit)` the body, raising `Answer`
        for one too large or cut short): its status and JSON body, or None for another path."""
        route = self._paths.get(path)
        if route is None:
            return None
        if method != route.method:
            return route.wrong_method()
        service = self.service if isinstance(self.service, ThreadedRelayService) else self.service()
        asked = table.Asked(service is not None, headers, self.max_body, self.operator)
        return table.drive(route.flow(asked), table.performer(service, who, read))

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        headers = {"content-type": environ.get("CONTENT_TYPE") or ""}
        if declared := environ.get("CONTENT_LENGTH"):
            headers["content-length"] = declared
        reply = self.dispatch(
            environ.get("REQUEST_METHOD", "GET").upper(),
            environ.get("PATH_INFO", ""),
            headers,
            lambda limit: _read(environ, limit),
            lambda: self.identify(environ),
        )
        if reply is None:
            if self.fallback is not None:
                return self.fallback(environ, start_response)
            reply = 404, {"error": "Not found"}
        status, document = table.rendered(reply)
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:  # a 4xx of the app's own (`Refused(…, 499)`) has none of its own
            phrase = "Client Error" if 400 <= status < 500 else "Error"
        head = [("Content-Type", document.media_type), ("Content-Length", str(len(document.body)))]
        start_response(f"{status} {phrase}", [*head, *document.headers])
        return [document.body]


def app(
    service: ServiceSource,
    identify: Identify,
    *,
    max_body: int = MAX_BODY,
    operator: Operator | None = None,
) -> Router:
    """The routes as an app of their own, to mount at `/api/talaria` (a dispatcher)."""
    return Router(service, identify, prefix="", max_body=max_body, operator=operator)


def middleware(
    wrapped: WSGIApplication,
    service: ServiceSource,
    identify: Identify,
    *,
    prefix: str = DEFAULT_PREFIX,
    max_body: int = MAX_BODY,
    operator: Operator | None = None,
) -> Router:
    """`wrapped` with the relay routes in front of it (`flask_app.wsgi_app = middleware(…)`)."""
    return Router(
        service, identify, prefix=prefix, max_body=max_body, fallback=wrapped, operator=operator
    )


def _read(environ: WSGIEnvironment, limit: int) -> bytes:
    """The body, read no further than `limit` bytes (the flow checked a declared length)."""
    stream = environ["wsgi.input"]
    declared = environ.get("CONTENT_LENGTH")
    if not declared and not environ.get("wsgi.input_terminated"):
        return b""  # no length and no end-of-input promise: PEP 3333 says read nothing
    size = int(declared) if declared else limit + 1  # chunked: read to the end, or past `limit`
    body = bytearray()
    while len(body) < size:
        if not (chunk := stream.read(min(size - len(body), _CHUNK))):
            if declared:
                raise table.Answer(400, "Request body incomplete")
            break
        body += chunk
    if len(body) > limit:
        raise table.Answer(413, "Request body too large")
    return bytes(body)
