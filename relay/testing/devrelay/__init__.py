"""A dev Talaria Relay: the publisher-facing endpoints with the real relay's checks, in memory.

    relay = DevRelay()
    invitation = relay.mint_invitation()
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        ...

Ported from the relay's Convex source (`http.ts`, `pairing.ts`, `publishers.ts`,
`completions.ts`): same checks, same order, same status codes and bodies. Each request is handled
by one synchronous call between reading the body and sending the answer, so no other request can
interleave between its checks and its changes. The `/admin/*` endpoints have no authentication:
they exist for loopback tests and the demo only.

`state` is what the relay keeps and tests read, with the checks of signed requests; `records` its
records; `validation` the relay's input rules and the routes' names; `app` serves them as the ASGI
app `DevRelay`.
"""

from relay.testing.devrelay.app import DevRelay
from relay.testing.devrelay.state import (
    DEFAULT_USER,
    INVITATION_TTL_MS,
    NONCE_WINDOW_MS,
    TIMESTAMP_SKEW_S,
    RecordedRequest,
)
from relay.testing.devrelay.validation import ROUTES, route_of

__all__ = [
    "DEFAULT_USER",
    "INVITATION_TTL_MS",
    "NONCE_WINDOW_MS",
    "ROUTES",
    "TIMESTAMP_SKEW_S",
    "DevRelay",
    "RecordedRequest",
    "route_of",
]
