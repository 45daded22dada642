"""Test doubles for `relay`: a dev Talaria Relay that checks what a publisher sends.

`DevRelay` is the relay (state and ASGI app): use it in process with `httpx.ASGITransport`, or over
real HTTP on loopback with `serve`. `MemoryHost` is a web app in memory that drives the publisher.
`Clock` stands still until told to move.
"""

from __future__ import annotations

from relay.testing.clock import Clock
from relay.testing.devrelay.app import DevRelay
from relay.testing.devrelay.records import Completion, KeyInfo, SessionRow, StartedEvent, ViewedAck
from relay.testing.devrelay.state import DEFAULT_USER, INVITATION_TTL_MS, RecordedRequest
from relay.testing.devrelay.validation import ROUTES, route_of
from relay.testing.memory import MemoryHost, MemorySession
from relay.testing.server import run, serve

__all__ = [
    "DEFAULT_USER",
    "INVITATION_TTL_MS",
    "ROUTES",
    "Clock",
    "Completion",
    "DevRelay",
    "KeyInfo",
    "MemoryHost",
    "MemorySession",
    "RecordedRequest",
    "SessionRow",
    "StartedEvent",
    "ViewedAck",
    "route_of",
    "run",
    "serve",
]
