"""What the dev relay holds, what tests set up (invitations, faults) and read back, and the
checks every signed request passes: signature, clock skew, key, nonce."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay.errors import InvalidInputError
from relay.protocol import JS_WHITESPACE, b64url, canonical_string
from relay.testing.devrelay.records import (
    Completion,
    Grant,
    KeyInfo,
    SessionRow,
    StartedEvent,
    ViewedAck,
    wire,
)
from relay.testing.devrelay.validation import ROUTES, b64url_decode, header_integer, utf16_len

DEFAULT_USER = "usr_dev"
INVITATION_TTL_MS = 10 * 60_000
# A fault whose request is handled as usual, only answered late.
SLOW = 0
NONCE_WINDOW_MS = 10 * 60_000
TIMESTAMP_SKEW_S = 5 * 60
# The requests a dev relay keeps by default, newest last: a dev relay left running through a day
# of development would otherwise keep every snapshot it was ever sent.
KEEP_REQUESTS = 1_000


@dataclass(frozen=True, slots=True)
class Auth:
    """Who signed a request (§2.3), and when the relay received it."""

    owner_user_id: str
    key_id: str
    nonce: str
    received_at: int


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


@dataclass(slots=True)
class Invitation:
    user_id: str
    expires_at: int
    consumed_at: int | None = None


@dataclass(slots=True)
class Publisher:
    owner_user_id: str
    label: str
    enabled: bool = True


@dataclass(slots=True)
class Fault:
    route: str
    status: int  # SLOW, or the status answered instead of handling the request
    remaining: int
    delay: float
    headers: Mapping[str, str]


class RelayState:
    """The relay's records, set-up and fault injection, and the views tests read.

    `requests` holds the last `keep_requests` requests (None: every one), so a long-running dev
    relay stays the same size; `requests_seen` counts them all.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        random_bytes: Callable[[int], bytes] = os.urandom,
        *,
        keep_requests: int | None = KEEP_REQUESTS,
    ) -> None:
        if keep_requests is not None and (type(keep_requests) is not int or keep_requests < 1):
            raise InvalidInputError("keep_requests must be a whole number above 0, or None")
        self._clock = clock
        self._random = random_bytes
        self.keep_requests = keep_requests
        self.requests_seen = 0
        self.requests: list[RecordedRequest] = []
        self.started_events: list[StartedEvent] = []
        self.viewed: list[ViewedAck] = []
        # Routes answered 404 the way an older relay answers them.
        self.unsupported: set[str] = set()
        self._faults: list[Fault] = []
        self._invitations: dict[str, Invitation] = {}
        self._publishers: dict[str, Publisher] = {}
        self._keys: dict[str, KeyInfo] = {}
        self._grants: dict[tuple[str, str], Grant] = {}  # (relay user, publisher)
        self._nonces: dict[tuple[str, str, str], int] = {}  # (owner, publisher, nonce) -> expiry

    def record(self, request: RecordedRequest) -> None:
        """Keep `request`, dropping the oldest past `keep_requests`."""
        self.requests_seen += 1
        self.requests.append(request)
        if self.keep_requests is not None and len(self.requests) > self.keep_requests:
            del self.requests[: len(self.requests) - self.keep_requests]

    def mint_invitation(self, user_id: str = DEFAULT_USER) -> str:
        """A one-time invitation of `user_id`, valid ten minutes, to register or to enroll."""
        if not isinstance(user_id, str) or not user_id:
            raise InvalidInputError("user_id must be a non-empty string")
        token = b64url(self._random(32))
        if token in self._invitations:
            raise InvalidInputError("random_bytes repeated itself: invitation tokens must differ")
        self._invitations[token] = Invitation(user_id, self._now_ms() + INVITATION_TTL_MS)
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
        self._faults.append(Fault(route, status, times, delay, dict(headers or {})))

    def slow(self, route: str, delay: float, *, times: int = 1) -> None:
        """Handle the next `times` requests to `route` as usual, answering `delay` seconds late."""
        if route not in ROUTES:
            raise InvalidInputError(f"route must be one of {', '.join(ROUTES)}")
        if times < 1 or delay < 0:
            raise InvalidInputError("times must be >= 1 and delay >= 0")
        self._faults.append(Fault(route, SLOW, times, delay, {}))

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

    def history(self, cursor: dict[int, int] | None = None) -> list[tuple[str, str | None, str]]:
        """Every (session, stream, phase) the grants' rows went through, in each grant's order;
        with `cursor` (start with `{}`; this call keeps it up to date) only those since the last
        call with it."""
        cursor = {} if cursor is None else cursor
        entries = []
        for number, grant in enumerate(self._grants.values()):
            entries += grant.history[cursor.get(number, 0) :]
            cursor[number] = len(grant.history)
        return entries

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

    def _now_ms(self) -> int:
        return math.floor(self._clock() * 1000)

    def _grants_of(self, publisher_id: str, profile_id: str) -> list[Grant]:
        return [
            grant
            for grant in self._grants.values()
            if (grant.publisher_id, grant.profile_id) == (publisher_id, profile_id)
        ]

    def _authenticate(
        self, method: str, path: str, headers: Mapping[str, str], text: str, publisher_id: str
    ) -> Auth | None:
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
        return Auth(key.owner_user_id, key_id, nonce, math.floor(now * 1000))

    def _authorize(
        self, auth: Auth, publisher_id: str, profile_id: str
    ) -> tuple[list[Grant], str | None]:
        """Nonce bookkeeping and key activation; the profile's grants, or why there are none.

        As in the relay's mutation, a request whose profile has no grant still spends its nonce
        and activates its key: only `replay` leaves everything as it was. The mutation checks the
        key and the publisher again; here nothing can change them after `_authenticate`.
        """
        key = self._keys[auth.key_id]
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
