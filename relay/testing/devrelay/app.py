"""`DevRelay`: the relay's state served as one ASGI app: its plumbing (lifespan, reading a
request, sending a JSON answer), dispatch, injected faults, and the routes of pairing (redeeming
an invitation to register a publisher or to enroll a profile, minting one over
`/admin/invitations`) and of the signed publisher `PUT`s."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import asdict
from email.utils import formatdate
from typing import Any

from relay.errors import InvalidInputError
from relay.protocol import MAX_ID, b64url, compact
from relay.testing.devrelay.records import Grant, KeyInfo, StartedEvent, ViewedAck
from relay.testing.devrelay.state import (
    DEFAULT_USER,
    SLOW,
    Auth,
    Fault,
    Invitation,
    Publisher,
    RecordedRequest,
    RelayState,
)
from relay.testing.devrelay.validation import (
    MAX_BODY_CHARS,
    JsonObject,
    b64url_decode,
    body_text,
    canonical_origin,
    json_object,
    parse_snapshot,
    parse_started,
    path_parts,
    route_of,
    safe_integer,
    string_field,
    utf16_len,
)

Reply = tuple[int, dict[str, Any]]
NOT_FOUND: Reply = (404, {"error": "not_found"})
UNAUTHORIZED: Reply = (401, {"error": "unauthorized"})

# The ASGI spec's types, as servers and `httpx.ASGITransport` call an app.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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


def _redeemed(user_id: str, publisher_id: str, profile_id: str, **more: object) -> Reply:
    body = {"ok": True, "protocolVersion": 2, "userId": user_id, "publisherId": publisher_id}
    return 201, {**body, "profileId": profile_id, **more}


class DevRelay(RelayState):
    """The relay state and the ASGI app that serves it (an instance is the app)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
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
            status, payload = self._handle(route, method, path, headers, body)
        else:
            status, payload = fault.status, {"error": "injected", "status": fault.status}
        self.record(RecordedRequest(method, path, status, body, headers, route))
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        # A Date as every real server sends: a publisher tells a skewed clock by it.
        extra = {"date": formatdate(self._clock(), usegmt=True)}
        if fault is not None:
            extra.update((name.lower(), value) for name, value in fault.headers.items())
        content = compact(payload)
        fields = [("content-type", "application/json"), ("content-length", str(len(content)))]
        raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in fields]
        raw += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": content})

    def _take_fault(self, route: str | None) -> Fault | None:
        for fault in self._faults:
            if fault.route == route:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _handle(
        self, route: str | None, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> Reply:
        if route in self.unsupported and route in ("publisher_redeem", "profile_redeem"):
            return NOT_FOUND
        if route == "publisher_redeem":
            return self._publisher_redeem(body)
        if route == "profile_redeem":
            return self._profile_redeem(path, headers, body)
        if method == "PUT" and path.startswith("/v1/publishers/"):
            return self._publisher_put(path, headers, body)
        if method == "POST" and path == "/admin/invitations":
            return self._admin_invitation(body)
        if method == "GET" and path == "/admin/state":
            return 200, self.state()
        return NOT_FOUND

    def _publisher_redeem(self, body: bytes) -> Reply:
        text = body_text(body)
        payload = json_object(text) if utf16_len(text) <= MAX_BODY_CHARS else None
        if payload is None:
            return 400, {"error": "invalid_json"}
        invitation = string_field(payload, "invitation", 256)
        publisher_id = canonical_origin(string_field(payload, "publisherId", MAX_ID) or "")
        profile_id = string_field(payload, "profileId", 128)
        label = string_field(payload, "label", 80)
        public_key = string_field(payload, "publicKey", 128)
        if not (invitation and publisher_id and profile_id and label and public_key):
            return 400, {"error": "invalid_pairing"}
        try:
            key_length = len(b64url_decode(public_key))
        except ValueError:
            key_length = 0
        if key_length != 32:
            return 400, {"error": "invalid_public_key"}
        key_id = "key_" + b64url(self._random(8))
        if key_id in self._keys:
            raise InvalidInputError("random_bytes repeated itself: key ids must differ")
        now = self._now_ms()
        invite, refusal = self._redeemable(invitation, now)
        if invite is None:
            return 400, {"error": refusal}
        user_id = invite.user_id
        publisher = self._publishers.get(publisher_id)
        if publisher is not None and publisher.owner_user_id != user_id:
            return 400, {"error": "publisher_already_registered"}
        if publisher is None:
            self._publishers[publisher_id] = Publisher(user_id, label)
        else:
            publisher.label, publisher.enabled = label, True
        # A new key stays inactive until its first signed publication, which revokes the others.
        self._keys[key_id] = KeyInfo(key_id, publisher_id, user_id, public_key, now)
        grant = self._grants.get((user_id, publisher_id))
        # Owner recovery: the owner's existing grant keeps its profile scope and its rows.
        preserved = grant is not None and grant.owner_user_id == user_id
        if grant is None:
            grant = Grant(user_id, user_id, publisher_id, profile_id)
            self._grants[(user_id, publisher_id)] = grant
        elif not preserved:
            grant.clear()
            grant.owner_user_id, grant.profile_id = user_id, profile_id
        invite.consumed_at = now
        return _redeemed(
            user_id, publisher_id, grant.profile_id, profileIdPreserved=preserved, keyId=key_id
        )

    def _profile_redeem(self, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        text = body_text(body)
        if utf16_len(text) > MAX_BODY_CHARS:
            return 413, {"error": "body_too_large"}
        payload = json_object(text)
        if payload is None:
            return 400, {"error": "invalid_json"}
        invitation = string_field(payload, "invitation", 256)
        publisher_id = canonical_origin(string_field(payload, "publisherId", MAX_ID) or "")
        profile_id = string_field(payload, "profileId", 128)
        if not (invitation and publisher_id and profile_id):
            return 400, {"error": "invalid_pairing"}
        # Signed with the publisher's existing key; the one-time invitation is the replay guard.
        auth = self._authenticate("POST", path, headers, text, publisher_id)
        if auth is None:
            return UNAUTHORIZED
        now = auth.received_at
        invite, refusal = self._redeemable(invitation, now)
        if invite is None:
            return 400, {"error": refusal}
        # The relay's `publisher_not_registered` answers a publisher changed since its signature
        # was checked: nothing here can change it in between.
        key = (invite.user_id, publisher_id)
        grant = self._grants.get(key)
        if grant is None:
            self._grants[key] = Grant(invite.user_id, auth.owner_user_id, publisher_id, profile_id)
        else:
            # One grant per relay user and publisher: a new scope starts with no rows.
            if (grant.owner_user_id, grant.profile_id) != (auth.owner_user_id, profile_id):
                grant.clear()
            grant.owner_user_id, grant.profile_id = auth.owner_user_id, profile_id
        invite.consumed_at = now
        return _redeemed(invite.user_id, publisher_id, profile_id)

    def _redeemable(self, token: str, now: int) -> tuple[Invitation | None, str]:
        invite = self._invitations.get(token)
        if invite is None:
            return None, "invalid_invitation"
        if invite.consumed_at is not None or invite.expires_at <= now:
            return None, "expired_invitation"
        return invite, ""

    def _admin_invitation(self, body: bytes) -> Reply:
        user_id: object = DEFAULT_USER
        if body.strip():
            payload = json_object(body_text(body))
            if payload is None:
                return 400, {"error": "invalid_json"}
            user_id = payload.get("userId", DEFAULT_USER)
        if not isinstance(user_id, str) or not user_id:
            return 400, {"error": "invalid_user"}
        token = self.mint_invitation(user_id)
        return 201, {"invitation": token, "expiresAt": self._invitations[token].expires_at}

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
        self.started_events.append(StartedEvent(**asdict(event), received_at=auth.received_at))
        return 200, {"status": "accepted"}
