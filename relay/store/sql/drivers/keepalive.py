"""TCP keepalive and a user timeout on every Postgres connection: a silent network is an error.

A connection whose packets are dropped (a firewall change, a NAT or load balancer that forgot
it, a partition) closes nothing: without keepalive an idle connection looks usable for hours and
a statement sent on it waits for ever. asyncpg sets neither option and takes no libpq
`keepalives*` parameters, so they are set on its socket once it connects: keepalive probes find
an idle connection dead, and `TCP_USER_TIMEOUT` (Linux) ends one whose sent data goes unacked,
each within about `wait_s` (the store's bounded wait). A Unix socket has neither and needs none.
"""

from __future__ import annotations

import contextlib
import math
import socket
from typing import Any


def options(wait_s: float) -> list[tuple[int, int, int]]:
    """The (level, option, value) triples for a TCP socket, those this platform has."""
    # Probes after the connection has been idle a third of the wait, then every sixth: the third
    # unanswered probe ends it, so a dead idle connection is found within about the wait.
    idle = max(1, math.floor(wait_s / 3))
    interval = max(1, math.floor(wait_s / 6))
    wanted = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", idle),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", interval),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", max(1000, math.floor(wait_s * 1000))),
    ]
    return [
        (level, getattr(socket, name), value)
        for level, name, value in wanted
        if hasattr(socket, name)
    ]


def apply(conn: Any, wait_s: float) -> None:
    transport = getattr(conn, "_transport", None)  # asyncpg keeps its transport there
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, option, value in options(wait_s):
        # A platform that refuses one option keeps the others.
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)
