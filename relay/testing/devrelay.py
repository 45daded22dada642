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
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from email.utils import formatdate
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay.errors import InvalidInputError
from relay.protocol import JS_WHITESPACE, MAX_ID, b64url, canonical_string, compact
from relay.testing.records import (
    Completion,
    Grant,
    KeyInfo,
    SessionRow,
    StartedEvent,
    ViewedAck,
    wire,
)
from relay.testing.validation import (
    MAX_BODY_CHARS,
    JsonObject,
    b64url_decode,
    body_text,
    canonical_origin,
    header_integer,
    json_object,
    parse_snapshot,
    parse_started,
    path_parts,
    safe_integer,
    string_field,
    utf16_len,
)

ROUTES = ("publisher_redeem", "profile_redeem", "snapshot", "viewed", "started")
DEFAULT_USER = "usr_dev"
INVITATION_TTL_MS = 10 * 60_000
NONCE_WINDOW_MS = 10 * 60_000
TIMESTAMP_SKEW_S = 5 * 60

# The ASGI spec's types, as servers and `httpx.ASGITransport` call an app.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Reply = tuple[int, dict[str, Any]]

_NOT_FOUND: Reply = (404, {"error": "not_found"})
# A fault whose request is handled as usual, only answered late.
_SLOW = 0
_UNAUTHORIZED: Reply = (401, {"error": "unauthorized"})


# ── what tests read ──────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the relay received it, and the status it answered."""

    method: str
    path: str  # the raw path, percent-encoding as sent, no query
    status: int
    body: bytes
    headers: Mapping[str, str]  # names lowercased
    route: str | None  # one of ROUTES, or None for admin and unknown paths

    def json(self) -> Any:
        return json.loads(self.body)


# ── internal records ─────────────────────────────────────────────────────────


@dataclass(slots=True)
class _Invitation:
    user_id: str
    expires_at: int
    consumed_at: int | None = None


@dataclass(slots=True)
class _Publisher:
    owner_user_id: str
    label: str
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class _Auth:
    owner_user_id: str
    key_id: str
    nonce: str
    received_at: int


@dataclass(slots=True)
class _Fault:
    route: str
    status: int
    remaining: int
    delay: float
    headers: Mapping[str, str]


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


class DevRelay:
    """The relay state and the ASGI app that serves it (an instance is the app)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._clock = clock
        self._random = random_bytes
        self.requests: list[RecordedRequest] = []
        self.started_events: list[StartedEvent] = []
        self.viewed: list[ViewedAck] = []
        # Routes answered 404 the way an older relay answers them.
        self.unsupported: set[str] = set()
        self._faults: list[_Fault] = []
        self._invitations: dict[str, _Invitation] = {}
        self._publishers: dict[str, _Publisher] = {}
        self._keys: dict[str, KeyInfo] = {}
        self._grants: dict[tuple[str, str], Grant] = {}  # (relay user, publisher)
        self._nonces: dict[tuple[str, str, str], int] = {}  # (owner, publisher, nonce) -> expiry

    # ── set-up and fault injection ──

    def mint_invitation(self, user_id: str = DEFAULT_USER) -> str:
        """A one-time invitation of `user_id`, valid ten minutes, to register or to enroll."""
        if not isinstance(user_id, str) or not user_id:
            raise InvalidInputError("user_id must be a non-empty string")
        token = b64url(self._random(32))
        if token in self._invitations:
            raise InvalidInputError("random_bytes repeated itself: invitation tokens must differ")
        self._invitations[token] = _Invitation(user_id, self._now_ms() + INVITATION_TTL_MS)
        return token

    def inject(
        self,
        route: str,
        status: int,
        *,
        times: int = 1,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests to `route` with `status` (and `headers`, such as
        `Retry-After`), after `delay` seconds.

        A faulted request is recorded but changes nothing, whatever the status.
        """
        if route not in ROUTES:
            raise InvalidInputError(f"route must be one of {', '.join(ROUTES)}")
        if not 100 <= status <= 599 or times < 1 or delay < 0:
            raise InvalidInputError("status must be 100..599, times >= 1 and delay >= 0")
        self._faults.append(_Fault(route, status, times, delay, dict(headers or {})))

    def slow(self, route: str, delay: float, *, times: int = 1) -> None:
        """Handle the next `times` requests to `route` as usual, answering `delay` seconds late."""
        if route not in ROUTES:
            raise InvalidInputError(f"route must be one of {', '.join(ROUTES)}")
        if times < 1 or delay < 0:
            raise InvalidInputError("times must be >= 1 and delay >= 0")
        self._faults.append(_Fault(route, _SLOW, times, delay, {}))

    # ── inspection ──

    def rows(
        self, publisher_id: str, profile_id: str, *, include_expired: bool = False
    ) -> list[SessionRow]:
        """The rows of every grant of `profile_id` on `publisher_id`, unexpired unless asked."""
        now = self._now_ms()
        return [
            row
            for grant in self._grants_of(publisher_id, profile_id)
            for row in grant.current(now, include_expired=include_expired)
        ]

    def completions(self, publisher_id: str, profile_id: str) -> list[Completion]:
        return [
            completion
            for grant in self._grants_of(publisher_id, profile_id)
            for completion in grant.completions.values()
        ]

    def keys(self, publisher_id: str | None = None) -> list[KeyInfo]:
        return [k for k in self._keys.values() if publisher_id in (None, k.publisher_id)]

    def public_key(self, key_id: str) -> Ed25519PublicKey:
        """The registered key `key_id`, to verify what a publisher signed; KeyError if none."""
        return Ed25519PublicKey.from_public_bytes(b64url_decode(self._keys[key_id].public_key))

    def state(self) -> dict[str, Any]:
        """Everything the relay holds, as `GET /admin/state` answers it; never private material."""
        now = self._now_ms()
        return {
            "publishers": [
                {"publisherId": pid, "ownerUserId": p.owner_user_id, "label": p.label,
                 "enabled": p.enabled}
                for pid, p in self._publishers.items()
            ],
            "keys": [
                {"keyId": k.key_id, "publisherId": k.publisher_id, "ownerUserId": k.owner_user_id,
                 "activated": k.activated_at is not None, "revoked": k.revoked_at is not None,
                 "activatedAt": k.activated_at, "revokedAt": k.revoked_at}
                for k in self._keys.values()
            ],
            "grants": [
                {"userId": g.user_id, "publisherOwnerUserId": g.owner_user_id,
                 "publisherId": g.publisher_id, "profileId": g.profile_id,
                 "rows": [wire(row) for row in g.current(now)], "stale": g.stale,
                 "completions": [wire(c) for c in g.completions.values()]}
                for g in self._grants.values()
            ],
            "viewed": [wire(ack) for ack in self.viewed],
            "started": [wire(event) for event in self.started_events],
        }  # fmt: skip

    # ── ASGI ──

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before sending its body
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        path = raw_path.partition(b"?")[0].decode("latin-1")
        method = scope["method"]
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        route = route_of(method, path)
        fault = self._take_fault(route)
        if fault is None or fault.status == _SLOW:
            status, payload = self._handle(method, path, headers, body)
        else:
            status, payload = fault.status, {"error": "injected", "status": fault.status}
        self.requests.append(RecordedRequest(method, path, status, body, headers, route))
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        # A Date as every real server sends: a publisher tells a skewed clock by it.
        extra = {"date": formatdate(self._clock(), usegmt=True)}
        if fault is not None:
            extra.update((name.lower(), value) for name, value in fault.headers.items())
        await _respond(send, status, payload, extra)

    def _take_fault(self, route: str | None) -> _Fault | None:
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
                return _NOT_FOUND
            return self._publisher_redeem(body)
        if method == "POST" and path == "/v1/pairings/profile/redeem":
            if "profile_redeem" in self.unsupported:
                return _NOT_FOUND
            return self._profile_redeem(path, headers, body)
        if method == "PUT" and path.startswith("/v1/publishers/"):
            return self._publisher_put(path, headers, body)
        if method == "POST" and path == "/admin/invitations":
            return self._admin_invitation(body)
        if method == "GET" and path == "/admin/state":
            return 200, self.state()
        return _NOT_FOUND

    # ── pairing ──

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
            self._publishers[publisher_id] = _Publisher(user_id, label)
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
        return 201, {
            "ok": True,
            "protocolVersion": 2,
            "userId": user_id,
            "publisherId": publisher_id,
            "profileId": grant.profile_id,
            "profileIdPreserved": preserved,
            "keyId": key_id,
        }

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
            return _UNAUTHORIZED
        now = auth.received_at
        invite, refusal = self._redeemable(invitation, now)
        if invite is None:
            return 400, {"error": refusal}
        publisher = self._publishers.get(publisher_id)
        if (
            publisher is None
            or publisher.owner_user_id != auth.owner_user_id
            or not publisher.enabled
        ):
            return 400, {"error": "publisher_not_registered"}
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
        return 201, {
            "ok": True,
            "protocolVersion": 2,
            "userId": invite.user_id,
            "publisherId": publisher_id,
            "profileId": profile_id,
        }

    def _redeemable(self, token: str, now: int) -> tuple[_Invitation | None, str]:
        invite = self._invitations.get(token)
        if invite is None:
            return None, "invalid_invitation"
        if invite.consumed_at is not None or invite.expires_at <= now:
            return None, "expired_invitation"
        return invite, ""

    # ── signed publisher requests ──

    def _authenticate(
        self, method: str, path: str, headers: Mapping[str, str], text: str, publisher_id: str
    ) -> _Auth | None:
        """The signature check of §2.3, over the raw path and the body text; None means 401."""
        key_id, nonce, timestamp, signature = (
            headers.get(f"x-talaria-{name}", "").strip(JS_WHITESPACE)
            for name in ("key-id", "nonce", "timestamp", "signature")
        )
        if not (key_id and nonce and timestamp and signature) or utf16_len(nonce) > 128:
            return None
        seconds = header_integer(timestamp)
        now = self._clock()
        if seconds is None or abs(now - seconds) > TIMESTAMP_SKEW_S:
            return None
        key = self._keys.get(key_id)
        publisher = self._publishers.get(publisher_id)
        if key is None or publisher is None or key.publisher_id != publisher_id:
            return None
        if publisher.owner_user_id != key.owner_user_id or not publisher.enabled:
            return None
        if key.revoked_at is not None:
            return None
        # The relay hashes the body as decoded text, re-encoded: the same bytes for UTF-8 bodies.
        message = canonical_string(method.upper(), path, timestamp, nonce, text.encode("utf-8"))
        try:
            public = Ed25519PublicKey.from_public_bytes(b64url_decode(key.public_key))
            public.verify(b64url_decode(signature), message)
        except (ValueError, InvalidSignature):
            return None
        return _Auth(key.owner_user_id, key_id, nonce, math.floor(now * 1000))

    def _publisher_put(self, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        parts = path_parts(path)
        publisher_id = canonical_origin(parts[2] if len(parts) > 2 else "")
        if publisher_id is None:
            return _NOT_FOUND
        text = body_text(body)
        if utf16_len(text) > MAX_BODY_CHARS:
            return 413, {"error": "body_too_large"}
        auth = self._authenticate("PUT", path, headers, text, publisher_id)
        if auth is None:
            return _UNAUTHORIZED
        payload = json_object(text)
        if payload is None:
            return 400, {"error": "invalid_json"}
        route = route_of("PUT", path)
        # An older relay reaches its "unknown shape" answer only after the checks above.
        if route is None or route in self.unsupported:
            return _NOT_FOUND
        profile_id = parts[4]
        if route == "snapshot":
            return self._snapshot(auth, publisher_id, profile_id, payload)
        if route == "viewed":
            return self._viewed(auth, publisher_id, profile_id, parts[6], payload)
        return self._started(auth, publisher_id, profile_id, parts[6], payload)

    def _authorize(
        self, auth: _Auth, publisher_id: str, profile_id: str
    ) -> tuple[list[Grant], str | None]:
        """Nonce bookkeeping and key activation; the profile's grants, or why there are none.

        As in the relay's mutation, a request whose profile has no grant still spends its nonce
        and activates its key: only `replay` leaves everything as it was.
        """
        publisher = self._publishers.get(publisher_id)
        key = self._keys.get(auth.key_id)
        if (
            publisher is None
            or not publisher.enabled
            or publisher.owner_user_id != auth.owner_user_id
            or key is None
            or (key.owner_user_id, key.publisher_id) != (auth.owner_user_id, publisher_id)
            or key.revoked_at is not None
        ):
            return [], "unauthorized"
        now = auth.received_at
        self._nonces = {k: expiry for k, expiry in self._nonces.items() if expiry > now}
        nonce_key = (auth.owner_user_id, publisher_id, auth.nonce)
        if nonce_key in self._nonces:
            return [], "replay"
        if key.activated_at is None:
            for other in list(self._keys.values()):
                if (other.owner_user_id, other.publisher_id) != (key.owner_user_id, publisher_id):
                    continue
                if other.key_id == key.key_id:
                    self._keys[other.key_id] = replace(other, activated_at=now)
                elif other.revoked_at is None:
                    self._keys[other.key_id] = replace(other, revoked_at=now)
        self._nonces[nonce_key] = now + NONCE_WINDOW_MS
        grants = [
            grant
            for grant in self._grants.values()
            if (grant.owner_user_id, grant.publisher_id, grant.profile_id)
            == (auth.owner_user_id, publisher_id, profile_id)
        ]
        return grants, None if grants else "unauthorized"

    def _snapshot(self, auth: _Auth, publisher_id: str, profile_id: str, body: JsonObject) -> Reply:
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
        self, auth: _Auth, publisher_id: str, profile_id: str, session_id: str, body: JsonObject
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
        self, auth: _Auth, publisher_id: str, profile_id: str, session_id: str, body: JsonObject
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

    # ── admin and helpers ──

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

    def _now_ms(self) -> int:
        return math.floor(self._clock() * 1000)

    def _grants_of(self, publisher_id: str, profile_id: str) -> list[Grant]:
        return [
            grant
            for grant in self._grants.values()
            if (grant.publisher_id, grant.profile_id) == (publisher_id, profile_id)
        ]


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(
    send: Send, status: int, payload: dict[str, Any], extra: Mapping[str, str]
) -> None:
    body = compact(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
