"""The publisher-key methods of `StoreGate`: checks, and the keys' encryption at rest.

A backend stores a key's PEM exactly as it gets it and hands it back as stored. Sealing (under
this process's passphrase) and opening happen here only, so every backend behaves the same.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Callable

from relay.errors import CorruptStateError, InvalidInputError, KeyPassphraseError
from relay.store import checks
from relay.store.keys import pkcs8
from relay.store.keys.keyring import Keyring, Passphrase, configured_passphrase
from relay.store.keys.pem import checked_pem
from relay.store.keys.pem import stored_pem as _stored

# (ref, stored PEM) -> the PEM to store instead; raising leaves every key as it was.
Rekeyed = Callable[[str, str], str]


def _opens(keyring: Keyring, pem: str, ref: str) -> bool:
    try:
        keyring.open(pem, ref)
    except KeyPassphraseError:
        return False
    return True


class KeyGate:
    """Checks the key hooks' arguments; seals keys on their way in, opens them on the way out."""

    # The process's passphrase, read when this store first handles a key.
    _keys: Keyring | None = None

    def _keyring(self) -> Keyring:
        if self._keys is None:
            self._keys = Keyring(configured_passphrase())
        return self._keys

    async def save_key(self, key_id: str, pem: str) -> str:
        checks.text("key_id", key_id)
        keyring, pem = self._keyring(), checked_pem(pem)
        if keyring.passphrase is not None:
            # Off the event loop: scrypt takes a good part of a second, on purpose.
            pem = await asyncio.to_thread(keyring.seal, pem)
        return await self._save_key(key_id, pem)

    async def delete_key(self, ref: str) -> bool:
        return await self._delete_key(checks.text("key reference", ref))

    async def stored_key(self, ref: str) -> str:
        return await self._checked_key(checks.text("key reference", ref))

    async def load_key(self, ref: str) -> str:
        # Not through `stored_key`: each public method is timed once (`relay.metrics`).
        stored = await self._checked_key(checks.text("key reference", ref))
        keyring = self._keyring()
        if not pkcs8.is_encrypted(stored):
            return keyring.open(stored, ref)  # nothing to derive: no thread
        return await asyncio.to_thread(keyring.open, stored, ref)

    async def rekey(self, passphrase: Passphrase | None) -> int:
        if passphrase is not None and not isinstance(passphrase, Passphrase):
            raise InvalidInputError("passphrase must be a Passphrase or None")
        current, target = self._keyring(), Keyring(passphrase)

        def rekeyed(ref: str, pem: str) -> str:
            stored = _stored(ref, pem)
            try:
                return target.seal(current.open(stored, ref))
            except KeyPassphraseError:
                # Already under the new passphrase: a rekey cut short by a crash resumes.
                if target.passphrase is not None and _opens(target, stored, ref):
                    return stored
                raise

        # Keys are derived inside the transaction (about a second a key): rekey is a rare
        # operator's command, and all or nothing matters more than a short lock.
        count = await self._rekey(rekeyed)
        self._keys = target  # this handle now reads the keys as they are stored
        return count

    async def _checked_key(self, ref: str) -> str:
        pem = await self._load_key(ref)
        if pem is None:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is missing")
        return _stored(ref, pem)

    # ── the hooks a backend implements ───────────────────────────────────────

    @abstractmethod
    async def _save_key(self, key_id: str, pem: str) -> str: ...

    @abstractmethod
    async def _load_key(self, ref: str) -> str | None:
        """The stored PEM, None when `ref` names none in this store."""

    @abstractmethod
    async def _delete_key(self, ref: str) -> bool:
        """Remove the key unless the registration names it; whether it was removed."""

    @abstractmethod
    async def _rekey(self, rekeyed: Rekeyed) -> int:
        """Replace every stored key's PEM by `rekeyed(ref, pem)`, all in one transaction (one
        locked update); if it raises, nothing changes. The number of keys."""
