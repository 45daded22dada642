"""The signed publisher routes: `PUT /v1/publishers/{publisher}/profiles/{profile}/…`."""

from __future__ import annotations

from collections.abc import Mapping

from relay.testing.devrelay.records import StartedEvent, ViewedAck
from relay.testing.devrelay.routes import NOT_FOUND, UNAUTHORIZED, Reply, route_of
from relay.testing.devrelay.signed import Auth, SignedRequests
from relay.testing.devrelay.validation import (
    MAX_BODY_CHARS,
    JsonObject,
    body_text,
    canonical_origin,
    json_object,
    parse_snapshot,
    parse_started,
    path_parts,
    safe_integer,
    utf16_len,
)


class PublisherRoutes(SignedRequests):
    """`…/snapshot`, `…/sessions/{session}/viewed` and `…/sessions/{session}/started`."""

    def _publisher_put(self, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        parts = path_parts(path)
        publisher_id = canonical_origin(parts[2] if len(parts) > 2 else "")
        if publisher_id is None:
            return NOT_FOUND
        text = body_text(body)
        if utf16_len(text) > MAX_BODY_CHARS:
            return 413, {"error": "body_too_large"}
        auth = self._authenticate("PUT", path, headers, text, publisher_id)
        if auth is None:
            return UNAUTHORIZED
        payload = json_object(text)
        if payload is None:
            return 400, {"error": "invalid_json"}
        route = route_of("PUT", path)
        # An older relay reaches its "unknown shape" answer only after the checks above.
        if route is None or route in self.unsupported:
            return NOT_FOUND
        profile_id = parts[4]
        if route == "snapshot":
            return self._snapshot(auth, publisher_id, profile_id, payload)
        if route == "viewed":
            return self._viewed(auth, publisher_id, profile_id, parts[6], payload)
        return self._started(auth, publisher_id, profile_id, parts[6], payload)

    def _snapshot(self, auth: Auth, publisher_id: str, profile_id: str, body: JsonObject) -> Reply:
        states = parse_snapshot(body)
        if states is None:
            return 400, {"error": "invalid_snapshot"}
        if len({state.session_id for state in states}) != len(states):
            # The relay's mutation throws before any change and the HTTP action does not catch it.
            return 500, {"error": "duplicate_snapshot_session"}
        grants, refusal = self._authorize(auth, publisher_id, profile_id)
        if refusal:
            return 409, {"status": refusal}
        for grant in grants:
            for state in states:
                grant.apply(state, auth.received_at)
        return 200, {"status": "accepted"}

    def _viewed(
        self, auth: Auth, publisher_id: str, profile_id: str, session_id: str, body: JsonObject
    ) -> Reply:
        through = safe_integer(body.get("through"))
        if through is None:
            return 400, {"error": "invalid_viewed"}
        grants, refusal = self._authorize(auth, publisher_id, profile_id)
        if refusal:
            return 409, {"status": refusal, "acknowledged": 0}
        # `through` and `updatedAt` are both publisher time, so relay time never bounds them.
        acknowledged = sum(grant.acknowledge(session_id, through) for grant in grants)
        self.viewed.append(
            ViewedAck(publisher_id, profile_id, session_id, through, acknowledged, auth.received_at)
        )
        return 200, {"status": "accepted", "acknowledged": acknowledged}

    def _started(
        self, auth: Auth, publisher_id: str, profile_id: str, session_id: str, body: JsonObject
    ) -> Reply:
        event = parse_started(body)
        if event is None or event.session_id != session_id:
            return 400, {"error": "invalid_session_started"}
        if (event.publisher_id, event.profile_id) != (publisher_id, profile_id):
            return 403, {"error": "profile_mismatch"}
        _, refusal = self._authorize(auth, publisher_id, profile_id)
        if refusal:
            return 409, {"status": refusal}
        self.started_events.append(
            StartedEvent(
                publisher_id, profile_id, session_id, event.event_id, event.started_at,
                auth.received_at,
            )
        )  # fmt: skip
        return 200, {"status": "accepted"}
