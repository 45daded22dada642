"""Signed publisher requests: who signed one (§2.3), and whether that publisher may write."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay.protocol import JS_WHITESPACE, canonical_string
from relay.testing.devrelay.records import Grant
from relay.testing.devrelay.state import RelayState
from relay.testing.devrelay.validation import b64url_decode, header_integer, utf16_len

NONCE_WINDOW_MS = 10 * 60_000
TIMESTAMP_SKEW_S = 5 * 60


@dataclass(frozen=True, slots=True)
class Auth:
    owner_user_id: str
    key_id: str
    nonce: str
    received_at: int


class SignedRequests(RelayState):
    """The checks every signed request passes: signature, clock skew, key, nonce."""

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
