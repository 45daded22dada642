"""Pairing: redeeming an invitation to register a publisher or to enroll a profile, and minting one
over `/admin/invitations`."""

from __future__ import annotations

from collections.abc import Mapping

from relay.errors import InvalidInputError
from relay.protocol import MAX_ID, b64url
from relay.testing.devrelay.records import Grant, KeyInfo
from relay.testing.devrelay.routes import UNAUTHORIZED, Reply
from relay.testing.devrelay.signed import SignedRequests
from relay.testing.devrelay.state import DEFAULT_USER, Invitation, Publisher
from relay.testing.devrelay.validation import (
    MAX_BODY_CHARS,
    b64url_decode,
    body_text,
    canonical_origin,
    json_object,
    string_field,
    utf16_len,
)


class Pairing(SignedRequests):
    """`POST /v1/pairings/publisher/redeem`, `POST /v1/pairings/profile/redeem` and
    `POST /admin/invitations`."""

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
            return UNAUTHORIZED
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
