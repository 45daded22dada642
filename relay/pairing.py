"""Pairing: register this server with Talaria Relay, or enroll one more profile.

A port of the pairing half of Talaria Web 1.20's `RelayService`. Each request is checked, the
relay redeems the invitation, and only then are the key, identity and registration saved; the
service validates the result with a real publish before it swaps publishers (`configure`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from relay.client import RelayClient
from relay.errors import (
    InvalidInputError,
    RelayError,
    RelayHttpError,
    RelayPairingError,
    RelayResponseError,
    RelayUnreachableError,
    StaleConfigError,
)
from relay.host import Host
from relay.protocol import b64url, compact, validated_origin
from relay.publishing.signing import load_key
from relay.store import DeletedScope, ProfileGrant, RelayConfig, checks
from relay.store.contract import Registration

PUBLISHER_REDEEM = "/v1/pairings/publisher/redeem"
PROFILE_REDEEM = "/v1/pairings/profile/redeem"
# Upstream's words, then the way out: forget the stored registration first.
DIFFERENT_RELAY = (
    "This Hermes server is registered to a different relay; to pair with this one, forget "
    "that registration first (talaria-relay unpair, or RelayService.unpair())"
)
# The manual's section on a disabled profile and its recovery, for the operator page to link
# (relative to the manual's root, docs/).
DISABLED_PROFILE_HELP = "pairing.md#when-a-profile-is-disabled"
# Enrollments racing on several replicas retry their save this often before giving up.
SAVE_ATTEMPTS = 5

INVALID_RESPONSE = "Talaria Relay returned an invalid response"

# (config, profile_id, identity): validate a saved registration with a real publish, then swap.
Configure = Callable[[RelayConfig, str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Asked:
    """A pairing request, checked; `profile` is the host's name for the caller's profile."""

    relay_url: str
    publisher_id: str
    invitation: str
    label: str
    profile: str


@dataclass(frozen=True, slots=True)
class Pairing:
    """The pairing state machine; `trusted`: the one relay origin this server pairs with."""

    store: Registration
    host: Host
    _: KW_ONLY
    trusted: str
    allow_insecure_loopback: bool
    client: Callable[[str], RelayClient]
    configure: Configure

    async def pair(self, body: object, profile: str, *, operator: bool) -> dict[str, Any]:
        """Register the server, or enroll another profile (`operator`: `RelayService.pair`).
        Nothing is locked while the relay is asked: saves are compare-and-set on the stored
        registration, so enrollments racing here or on other replicas keep every mapping, and of
        registrations racing only one wins."""
        if type(profile) is not str:
            raise InvalidInputError("profile must be a string")
        checks.flag("operator", operator)
        if not isinstance(body, dict):
            raise RelayPairingError("Invalid pairing request", 400)
        fields = [body.get(name) for name in ("relay_url", "publisher_id", "publisher_invitation")]
        fields.append(body.get("label") or "Talaria Web")
        if not all(isinstance(value, str) for value in fields):
            raise RelayPairingError("Missing relay pairing fields", 400)
        relay_url, publisher_id, invitation, label = (str(value) for value in fields)
        if not all(map(checks.storable, (relay_url, publisher_id, invitation, label))):
            raise RelayPairingError("Invalid relay pairing fields", 400)
        try:
            relay_url = self._relay_origin(relay_url)
            publisher_id = validated_origin(publisher_id)
        except RelayError as error:
            raise RelayPairingError(str(error), 400) from error
        if relay_url != self.trusted:
            raise RelayPairingError("Untrusted Talaria Relay origin", 400)
        if not 1 <= len(invitation) <= 256 or not 1 <= len(label) <= 80:
            raise RelayPairingError("Invalid relay pairing fields", 400)
        asked = _Asked(relay_url, publisher_id, invitation, label, await self._available(profile))
        existing = await self.store.load_config()
        if existing is not None:
            return await self._enroll(existing, asked)
        if not operator:
            raise RelayPairingError(
                "An owner must register this Hermes server with Talaria Relay before profile "
                "enrollment",
                409,
            )
        return await self._register(asked)

    async def _available(self, raw_profile: str) -> str:
        profile = raw_profile.strip()
        try:
            if not profile or not checks.storable(profile):
                raise ValueError(profile)
            canonical = self.host.canonical_profile(profile)
            if not await self.host.profile_available(canonical):
                raise LookupError(canonical)
        except (ValueError, LookupError, OSError, RelayError) as error:
            raise RelayPairingError("Hermes profile is unavailable", 403) from error
        return canonical

    async def _profile_identity(self, canonical: str) -> str:
        # Minted only once the relay accepted: a refused enrollment leaves no identity behind.
        try:
            return await self.store.profile_identity(canonical)
        except (ValueError, LookupError, OSError, RelayError) as error:
            raise RelayPairingError("Hermes profile is unavailable", 403) from error

    async def _enroll(self, existing: RelayConfig, asked: _Asked) -> dict[str, Any]:
        publisher_id, canonical = asked.publisher_id, asked.profile
        if existing.url != asked.relay_url or existing.publisher_id != publisher_id:
            raise RelayPairingError(DIFFERENT_RELAY, 409)
        known = existing.profiles.get(canonical)
        # Read, not minted: the identity is minted only once the relay took the enrollment.
        stored = (await self.store.identities()).get(canonical)
        # A recreated profile (new identity) gets a new relay scope.
        reuse = known is not None and stored is not None and known.identity == stored
        profile_id = known.profile_id if known and reuse else f"prf_{uuid.uuid4().hex}"
        payload = await self._redeem(
            existing.url,
            PROFILE_REDEEM,
            {"invitation": asked.invitation, "publisherId": publisher_id, "profileId": profile_id},
            "Talaria Relay rejected the profile enrollment",
            key=load_key(await self.store.load_key(existing.key_ref)),
            key_id=existing.key_id,
        )
        if payload.get("publisherId") != publisher_id or payload.get("profileId") != profile_id:
            raise RelayPairingError(INVALID_RESPONSE, 502)
        identity = await self._profile_identity(canonical)
        if stored is not None and identity != stored:
            raise RelayPairingError("Hermes profile changed during relay enrollment", 409)
        saved = await self._add_grant(existing, canonical, ProfileGrant(identity, profile_id))
        await self.configure(saved, profile_id, identity)
        return {"ok": True, "publisher_id": publisher_id}

    async def _add_grant(self, read: RelayConfig, profile: str, grant: ProfileGrant) -> RelayConfig:
        """Save the registration with one more grant, over whatever another replica saved since."""
        latest: RelayConfig | None = read
        for _ in range(SAVE_ATTEMPTS):
            if latest is None or (latest.url, latest.publisher_id) != (read.url, read.publisher_id):
                break
            updated = replace(latest, profiles={**latest.profiles, profile: grant})
            try:
                await self.store.save_config(updated, expected_generation=latest.generation)
            except StaleConfigError:
                latest = await self.store.load_config()
                continue
            return await self._saved()
        raise RelayPairingError(DIFFERENT_RELAY, 409)

    async def _saved(self) -> RelayConfig:
        # Read back, so the publisher knows the generation it is built from.
        saved = await self.store.load_config()
        if saved is None:
            raise StaleConfigError("the relay registration vanished as it was saved")
        return saved

    async def _register(self, asked: _Asked) -> dict[str, Any]:
        key = Ed25519PrivateKey.generate()
        profile_id = f"prf_{uuid.uuid4().hex}"
        public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        request = {
            "invitation": asked.invitation,
            "publisherId": asked.publisher_id,
            "profileId": profile_id,
            "label": asked.label,
            "publicKey": b64url(public),
        }
        payload = await self._redeem(
            asked.relay_url, PUBLISHER_REDEEM, request, "Talaria Relay rejected server registration"
        )
        key_id, paired_profile = payload.get("keyId"), payload.get("profileId")
        paired_publisher, preserved = payload.get("publisherId"), payload.get("profileIdPreserved")
        if (
            not isinstance(key_id, str)
            or not key_id
            or not isinstance(paired_publisher, str)
            or not isinstance(paired_profile, str)
            or not paired_profile
            or not isinstance(preserved, bool)
            or (paired_profile != profile_id and not preserved)
        ):
            raise RelayPairingError(INVALID_RESPONSE, 502)
        try:
            final_publisher = validated_origin(paired_publisher)
        except RelayError as error:
            raise RelayPairingError(INVALID_RESPONSE, 502) from error
        identity = await self._profile_identity(asked.profile)
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
        # Durable before the registration names it.
        key_ref = await self.store.save_key(key_id, pem)
        grants = {asked.profile: ProfileGrant(identity, paired_profile)}
        config = RelayConfig(asked.relay_url, final_publisher, key_id, key_ref, grants)
        try:
            await self.store.save_config(config, expected_generation=0)
        except StaleConfigError as error:
            # The winner's registration stands; ours would leave a key nothing names.
            with contextlib.suppress(RelayError):
                await self.store.delete_key(key_ref)
            raise RelayPairingError(
                "Another server process registered this Hermes server meanwhile", 409
            ) from error
        await self.configure(await self._saved(), paired_profile, identity)
        return {"ok": True, "publisher_id": final_publisher}

    async def _redeem(
        self,
        relay_url: str,
        path: str,
        body: dict[str, str],
        rejected: str,
        *,
        key: Ed25519PrivateKey | None = None,
        key_id: str | None = None,
    ) -> dict[str, Any]:
        """The relay's answer to a redeem, in protocol 2, or the `RelayPairingError` to answer."""
        try:
            payload = await self.client(relay_url).post(path, compact(body), key=key, key_id=key_id)
        except RelayHttpError as error:
            status = 409 if 400 <= error.status < 500 else 502
            raise RelayPairingError(f"{rejected} (HTTP {error.status})", status) from error
        except RelayUnreachableError as error:
            raise RelayPairingError("Could not reach Talaria Relay", 502) from error
        except RelayResponseError as error:
            raise RelayPairingError(INVALID_RESPONSE, 502) from error
        if payload.get("protocolVersion") != 2:
            raise RelayPairingError(INVALID_RESPONSE, 502)
        return payload

    async def binding(
        self, profile: str, config: RelayConfig | None
    ) -> tuple[str | None, DeletedScope | None]:
        """What a deletion of `profile`'s session binds to, as far as can be read now: the
        profile's identity and its relay scope (`config`: the running one, else the stored)."""
        if config is None:
            with contextlib.suppress(RelayError):  # unreadable: keep the deletion, bind it later
                config = await self.store.load_config()
        grant = config.profiles.get(profile) if config else None
        identity = grant.identity if grant else None
        if identity is None:
            with contextlib.suppress(RelayError):  # bind when this profile becomes available
                if await self.host.profile_available(profile):
                    identity = await self.store.profile_identity(profile)
        if config is None or grant is None:
            return identity, None
        return identity, DeletedScope(config.url, config.publisher_id, grant.profile_id)

    def _relay_origin(self, raw: str) -> str:
        """The relay origin as given: https, or http to a loopback host when allowed."""
        try:
            return validated_origin(raw, True)
        except RelayError as error:
            origin = validated_origin(raw)
            if self.allow_insecure_loopback and _is_loopback(origin):
                return origin
            # Plain http: upstream's words, then the one way it is accepted.
            raise InvalidInputError(
                f"{error}; http:// is accepted only for a loopback relay, with "
                "allow_insecure_loopback=True (the command line's --allow-insecure-loopback)"
            ) from None


def _is_loopback(origin: str) -> bool:
    host = urlsplit(origin).hostname or ""
    with contextlib.suppress(ValueError):
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    return False
