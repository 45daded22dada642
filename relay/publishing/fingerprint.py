"""What may be shown of the stored publisher key: whether it is encrypted, and its public
fingerprint. `talaria-relay status` and the operator page both show these; never the key."""

from __future__ import annotations

import base64
import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from relay.errors import RelayError
from relay.publishing.signing import load_key
from relay.store import RelayStore
from relay.store.keys import pkcs8


def fingerprint(pem: str) -> str:
    """`SHA256:<base64>` of the raw public key, as ssh prints one; never the private key."""
    return public_fingerprint(load_key(pem).public_key())


def public_fingerprint(public: Ed25519PublicKey) -> str:
    """`fingerprint` of a key already loaded."""
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    digest = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


async def key_state(
    store: RelayStore, ref: str, loaded: str | None = None
) -> tuple[bool | None, str | None]:
    """Whether the stored key is encrypted, and its fingerprint; None for what cannot be known
    (a key missing, unreadable, or encrypted without the passphrase here). `loaded`: the
    fingerprint of that key as a publisher holds it, so it is not opened again (an encrypted
    key's opening costs a scrypt derivation: 128 MiB and about 0.3 s of CPU)."""
    try:
        encrypted = pkcs8.is_encrypted(await store.stored_key(ref))
    except RelayError:
        return None, None
    if loaded is not None:
        return encrypted, loaded
    try:
        return encrypted, fingerprint(await store.load_key(ref))
    except RelayError:
        return encrypted, None
