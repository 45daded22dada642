"""The publisher-facing routes: their names, which one a request targets, what a route answers."""

from __future__ import annotations

from typing import Any

from relay.testing.devrelay.validation import path_parts

ROUTES = ("publisher_redeem", "profile_redeem", "snapshot", "viewed", "started")

Reply = tuple[int, dict[str, Any]]
NOT_FOUND: Reply = (404, {"error": "not_found"})
UNAUTHORIZED: Reply = (401, {"error": "unauthorized"})


def route_of(method: str, path: str) -> str | None:
    """Which publisher-facing route a request targets, by shape alone."""
    if method == "POST" and path == "/v1/pairings/publisher/redeem":
        return "publisher_redeem"
    if method == "POST" and path == "/v1/pairings/profile/redeem":
        return "profile_redeem"
    if method != "PUT" or not path.startswith("/v1/publishers/"):
        return None
    parts = path_parts(path)
    if len(parts) < 5 or parts[3] != "profiles":
        return None
    if len(parts) == 6 and parts[5] == "snapshot":
        return "snapshot"
    if len(parts) == 8 and parts[5] == "sessions" and parts[7] in ("viewed", "started"):
        return parts[7]
    return None
