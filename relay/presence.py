"""Browser presence: a tab with an active lease mutes its profile's alerts.

Leases live in the store, so a tab's heartbeat may land on any replica and every replica that
publishes sees it. A lease lasts 90 s from when a server saw it; each tab's sequence number is
fenced 15 minutes past that, so a delayed lower sequence stays rejected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relay.errors import InvalidInputError, RelayPairingError
from relay.protocol import (
    MAX_SAFE_INTEGER,
    PRESENCE_FENCE_MS,
    PRESENCE_LEASE_MS,
    PRESENCE_MAX_TABS,
    PRESENCE_TAB_PATTERN,
)
from relay.store import checks
from relay.store.contract import PresenceLeases
from relay.store.records import PassView


@dataclass(frozen=True, slots=True)
class Presence:
    """Presence leases of every profile, on the shared store, stamped by `clock` (Unix seconds)."""

    store: PresenceLeases
    clock: Callable[[], float] = time.time

    async def update(self, body: object, profile: str) -> dict[str, Any]:
        """Apply a browser's `{tab_id, active, seq}`; the answer of `POST /api/talaria/presence`."""
        if type(profile) is not str:
            raise InvalidInputError("profile must be a string")
        if not isinstance(body, dict):
            raise RelayPairingError("Invalid presence request", 400)
        tab_id, active, seq = body.get("tab_id"), body.get("active"), body.get("seq")
        if isinstance(seq, float) and seq.is_integer():
            seq = int(seq)  # JSON has one number type: 5.0 is the integer 5
        if (
            not isinstance(tab_id, str)
            or not PRESENCE_TAB_PATTERN.fullmatch(tab_id)
            or not isinstance(active, bool)
            or not isinstance(seq, int)
            or isinstance(seq, bool)
            # Upstream admits 2^53 itself; one less keeps every stored sequence a safe integer.
            or not 0 <= seq <= MAX_SAFE_INTEGER
        ):
            raise RelayPairingError("Invalid presence request", 400)
        name = profile.strip()
        if not name or not checks.storable(name):
            raise RelayPairingError("Hermes profile is unavailable", 403)
        await self.store.apply_presence(
            name,
            tab_id,
            seq,
            active,
            int(self.clock() * 1000),
            lease_ms=PRESENCE_LEASE_MS,
            fence_ms=PRESENCE_FENCE_MS,
            max_tabs=PRESENCE_MAX_TABS,
        )
        return {"ok": True, "lease_seconds": PRESENCE_LEASE_MS // 1000 if active else 0}

    async def active(self, profile: str, view: PassView | None = None) -> bool:
        """Whether a tab of the profile holds an active, unexpired lease; as a publishing pass's
        `view` read it, when it read the profile's."""
        checks.text("profile", profile)
        if view is not None and profile in view.presence:
            return view.presence[profile]
        return await self.store.presence_active(profile, int(self.clock() * 1000))
