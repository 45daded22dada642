"""ASGI plumbing of the dev relay: lifespan, reading a request, sending a JSON answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from relay.protocol import compact

# The ASGI spec's types, as servers and `httpx.ASGITransport` call an app.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def request_of(scope: Scope) -> tuple[str, str, dict[str, str]]:
    """The method, the raw path (percent-encoding as sent, no query) and the headers (names
    lowercased, repeated ones joined with ", ")."""
    # The signature covers the path as sent: `path` would be percent-decoded.
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = raw_path.partition(b"?")[0].decode("latin-1")
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return scope["method"], path, headers


async def read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client went away before sending it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send, status: int, payload: dict[str, Any], extra: Mapping[str, str]
) -> None:
    body = compact(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
