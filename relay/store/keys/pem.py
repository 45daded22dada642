"""A publisher key's PEM as the store takes it and reads it back: PKCS#8 Ed25519, or sealed."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay.errors import CorruptStateError, InvalidInputError
from relay.store import checks
from relay.store.keys import pkcs8


def checked_pem(pem: object) -> str:
    """`pem` if it is a PKCS#8 Ed25519 private key, or one encrypted under a passphrase."""
    try:
        # cryptography ignores a NUL after the PEM block, but a Postgres text column refuses it.
        if type(pem) is not str or len(pem) > checks.MAX_TEXT or "\x00" in pem:
            raise TypeError(pem)
        if pkcs8.is_encrypted(pem):
            return pkcs8.checked(pem)  # what it holds shows once a passphrase opens it
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (TypeError, ValueError, UnicodeError):
        raise InvalidInputError("publisher key must be a PKCS#8 PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInputError("publisher key must be an Ed25519 private key")
    return pem


def stored_pem(ref: str, pem: str) -> str:
    """A PEM read back from the store, checked: stored state gone bad is `CorruptStateError`."""
    try:
        return checked_pem(pem)
    except InvalidInputError as error:
        raise CorruptStateError(f"Talaria publisher key {ref!r} is unreadable: {error}") from None
