"""The registration a publisher signs with: its config and key, and a newer one another replica
saved (a new key or profile), adopted in place when the pass's view or the relay's 401 to the
old key tells of it. Another relay is another registration: the service swaps publishers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from relay.client import RelayClient
from relay.errors import CorruptStateError, RelayHttpError
from relay.publishing.clock import StoreClock
from relay.store import RelayConfig
from relay.store.contract import Registration


def load_key(pem: str) -> Ed25519PrivateKey:
    """The publisher's Ed25519 key from its PKCS#8 PEM."""
    key = load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise CorruptStateError("Talaria publisher key must be an Ed25519 private key")
    return key


@dataclass(eq=False)
class Signer:
    """Signs each PUT under `config`'s key; `await load()` before the first."""

    config: RelayConfig
    store: Registration
    client: RelayClient
    time: StoreClock
    key: Ed25519PrivateKey | None = None
    _following: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def load(self) -> None:
        self.key = load_key(await self.store.load_key(self.config.key_ref))

    async def follow(self, refused: int | None = None) -> bool:
        """Adopt a registration another replica saved; whether one was. `refused`: the generation
        a request the relay refused (401) was signed under: of requests refused at once, the
        first adopts the new registration, the others find it adopted without a store read."""
        async with self._following:  # one swap at a time; held over store reads, never a PUT
            if refused is not None and refused != self.config.generation:
                return True
            latest = await self.store.load_config()
            # Another relay is another registration: the service swaps publishers for that.
            if (
                latest is None
                or latest.generation == self.config.generation
                or latest.url != self.config.url
            ):
                return False
            key = load_key(await self.store.load_key(latest.key_ref))
            # Key and config change together, with no await between: a PUT signs with a pair.
            self.key, self.config = key, latest
            return True

    async def put(self, path: str, body: bytes) -> None:
        if self.key is None:
            raise RuntimeError("RelayPublisher.initialize() was not awaited")
        key, key_id, generation = self.key, self.config.key_id, self.config.generation
        try:
            try:
                await self.client.put(path, body, key=key, key_id=key_id)
            except RelayHttpError as error:
                # Another replica may have re-registered: the old key's 401 is no reason to stop.
                if error.status != 401 or not await self.follow(generation):
                    raise
                await self.client.put(path, body, key=self.key, key_id=self.config.key_id)
        except RelayHttpError as error:
            if error.status == 401 and (note := self.time.note()):
                # A refused signature from a server whose clock is far off: say so, not only 401.
                error.args = (f"{error}; {note}",)
            raise
