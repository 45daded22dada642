"""A connection refused, said as what it means: nothing is listening at that address.

Drivers say `[Errno 111] Connect call failed ('127.0.0.1', 5433)` (asyncio) or bury it under
"All connection attempts failed" (httpx); a user who mistyped a port needs the address and the
likely fix, for the store and the relay alike.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

# asyncio's words for a refused connect: `('host', port)` or, for IPv6, `('::1', port, 0, 0)`.
_FAILED = re.compile(r"Connect call failed \('([^']*)', (\d+)")


def chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from, and so on: a bounded walk, since a chain may loop."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def nothing_listening(exc: BaseException) -> str | None:
    """`nothing is listening at HOST:PORT` when `exc`, or its cause, is a refused connection."""
    places: dict[str, None] = {}
    refused = False
    for seen in chain(exc):
        refused = refused or isinstance(seen, ConnectionRefusedError)
        for host, port in _FAILED.findall(str(seen)):
            places[f"[{host}]:{port}" if ":" in host else f"{host}:{port}"] = None
    if not places or not (refused or "Errno 111" in str(exc)):
        return None
    return f"nothing is listening at {' or '.join(places)} (is the server up, on that port?)"


def unknown_host(exc: BaseException, host: str | None = None) -> str | None:
    """`no host named HOST was found (DNS: …): check its spelling` when `exc` (or what it was
    raised from) is a failed name lookup; None otherwise. Without `host` (a driver's error does
    not say which of a URL's hosts it looked up) the message points at the URL beside it."""
    for seen in chain(exc):
        if isinstance(seen, socket.gaierror):
            reason = seen.strerror or str(seen)
            if host:
                return f"no host named {host} was found (DNS: {reason}): check its spelling"
            return f"its host name was not found (DNS: {reason}): check its spelling in the URL"
    return None
