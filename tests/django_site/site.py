"""What the running test wires in: the app's sessions, and the relay its views tell of changes.

The views are synchronous, under WSGI and ASGI alike (Django runs them in a thread under ASGI),
so `relay` has the threaded service's blocking methods: the threaded service itself under WSGI,
`OnLoop` over the async service under ASGI.
"""

from __future__ import annotations

from typing import Any, Protocol

from asgiref.sync import async_to_sync

from examples.hermes import Sessions
from relay.routes import Caller
from relay.service import RelayService

TOKENS = {
    "owner-token": Caller("default", operator=True),
    "member-token": Caller("default", operator=False),
}


class Relay(Protocol):
    """The relay calls the views make."""

    def changed(self) -> None: ...
    def note_terminal(self, stream_id: str, phase: str) -> None: ...
    def clear_deleted(self, session_id: str, profile: str | None) -> None: ...


class OnLoop:
    """The async service's calls from a view's thread, run on the server's event loop."""

    def __init__(self, service: RelayService) -> None:
        self._service = service

    def changed(self) -> None:
        async_to_sync(self._changed)()

    async def _changed(self) -> None:
        self._service.changed()

    def note_terminal(self, stream_id: str, phase: str) -> None:
        async_to_sync(self._service.note_terminal)(stream_id, phase)

    def clear_deleted(self, session_id: str, profile: str | None) -> None:
        async_to_sync(self._service.clear_deleted)(session_id, profile)


class Wired:
    sessions: Sessions = Sessions()
    relay: Relay | None = None


def caller(authorization: str | None) -> Caller | None:
    """The app's auth: a bearer token per user (a real app reads its login session)."""
    return TOKENS.get((authorization or "").removeprefix("Bearer "))


def is_operator(found: Caller) -> bool:
    """Who may read the operator page: here, the owner (a real app asks its roles)."""
    return found.operator


def wire(sessions: Sessions, relay: Any) -> None:
    Wired.sessions, Wired.relay = sessions, relay
