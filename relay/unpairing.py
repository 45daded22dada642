"""Unpairing: forget this server's registration with Talaria Relay, so it can pair again.

The relay keeps its side (there is no unpair request in the protocol): pairing again, with the
same relay or another, needs a new invitation and makes a new key and new relay scopes. Profile
identities stay (they name the web app's profiles, not a relay), and so do the revision floor
and the ledgers of the old scopes, which no registration names any more.
"""

from __future__ import annotations

import contextlib

from relay.errors import CorruptStateError, RelayError, StaleConfigError
from relay.store import RelayConfig
from relay.store.contract import Registration

# Saves racing the forget (another replica enrolling a profile) are read again this often.
ATTEMPTS = 5


async def unpair(store: Registration, *, keep_relay: str | None = None) -> RelayConfig | None:
    """Forget the stored registration and delete its key; the registration forgotten, or None
    when there was none (or it is with `keep_relay`, an origin, and was kept). An unreadable
    one is forgotten too (that is one reason to unpair); its key, unnamed now, is left."""
    for _ in range(ATTEMPTS):
        try:
            config = await store.load_config()
        except CorruptStateError:
            await store.forget_registration(expected_generation=None)
            return None
        if config is None or (keep_relay is not None and config.url == keep_relay):
            return None
        try:
            await store.forget_registration(expected_generation=config.generation)
        except StaleConfigError:
            continue  # another replica saved meanwhile: read it again
        # A key left behind costs a row and names nothing; the registration is gone either way.
        with contextlib.suppress(RelayError):
            await store.delete_key(config.key_ref)
        return config
    raise StaleConfigError("the relay registration kept changing while it was being forgotten")
