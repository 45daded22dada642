"""`DevRelay`: the routes composed into one ASGI app, with its dispatch and injected faults."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from email.utils import formatdate

from relay.testing.devrelay.asgi import (
    Receive,
    Scope,
    Send,
    lifespan,
    read_body,
    request_of,
    respond,
)
from relay.testing.devrelay.pairing import Pairing
from relay.testing.devrelay.publishers import PublisherRoutes
from relay.testing.devrelay.routes import NOT_FOUND, Reply, route_of
from relay.testing.devrelay.state import SLOW, Fault, RecordedRequest


class DevRelay(Pairing, PublisherRoutes):
    """The relay state and the ASGI app that serves it (an instance is the app)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if body is None:
            return  # the client went away before sending its body
        method, path, headers = request_of(scope)
        route = route_of(method, path)
        fault = self._take_fault(route)
        if fault is None or fault.status == SLOW:
            status, payload = self._handle(method, path, headers, body)
        else:
            status, payload = fault.status, {"error": "injected", "status": fault.status}
        self.record(RecordedRequest(method, path, status, body, headers, route))
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        # A Date as every real server sends: a publisher tells a skewed clock by it.
        extra = {"date": formatdate(self._clock(), usegmt=True)}
        if fault is not None:
            extra.update((name.lower(), value) for name, value in fault.headers.items())
        await respond(send, status, payload, extra)

    def _take_fault(self, route: str | None) -> Fault | None:
        for fault in self._faults:
            if fault.route == route:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        if method == "POST" and path == "/v1/pairings/publisher/redeem":
            if "publisher_redeem" in self.unsupported:
                return NOT_FOUND
            return self._publisher_redeem(body)
        if method == "POST" and path == "/v1/pairings/profile/redeem":
            if "profile_redeem" in self.unsupported:
                return NOT_FOUND
            return self._profile_redeem(path, headers, body)
        if method == "PUT" and path.startswith("/v1/publishers/"):
            return self._publisher_put(path, headers, body)
        if method == "POST" and path == "/admin/invitations":
            return self._admin_invitation(body)
        if method == "GET" and path == "/admin/state":
            return 200, self.state()
        return NOT_FOUND
