"""The key passphrase of this process, and sealing and opening publisher keys with it.

The passphrase is configuration of the process: `TALARIA_RELAY_KEY_PASSPHRASE`, or the file
`TALARIA_RELAY_KEY_PASSPHRASE_FILE` names (its one trailing newline dropped). It is never
printed, logged or put in an exception: messages name where it came from, never what it is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay.errors import CorruptStateError, InvalidInputError, KeyPassphraseError
from relay.store.keys import pkcs8
from relay.store.keys.pem import stored_pem

PASSPHRASE_ENV = "TALARIA_RELAY_KEY_PASSPHRASE"  # noqa: S105 (a variable name, not a secret)
PASSPHRASE_FILE_ENV = "TALARIA_RELAY_KEY_PASSPHRASE_FILE"  # noqa: S105 (likewise)


class Passphrase:
    """A key passphrase and where it came from; its repr and str show only where."""

    __slots__ = ("_secret", "source")

    def __init__(self, secret: bytes, source: str) -> None:
        if not secret:
            raise InvalidInputError(f"the key passphrase from {source} is empty")
        self._secret = secret
        self.source = source

    def __repr__(self) -> str:
        return f"<Passphrase from {self.source}>"

    __str__ = __repr__

    def secret(self) -> bytes:
        return self._secret


def passphrase_from_env(name: str, environ: Mapping[str, str] = os.environ) -> Passphrase:
    """The passphrase in the environment variable `name`; `InvalidInputError` if it is unset."""
    value = environ.get(name)
    if value is None:
        raise InvalidInputError(f"the environment variable {name} is not set")
    return Passphrase(os.fsencode(value), f"${name}")


def passphrase_from_file(path: str | Path) -> Passphrase:
    """The passphrase in the file at `path`, without its trailing newline."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        # The reason, never the content: `strerror` is the OS's text for the error number.
        raise InvalidInputError(
            f"cannot read the key passphrase file {path}: {error.strerror}"
        ) from None
    raw = raw.removesuffix(b"\r\n") if raw.endswith(b"\r\n") else raw.removesuffix(b"\n")
    return Passphrase(raw, f"the file {path}")


def configured_passphrase(environ: Mapping[str, str] = os.environ) -> Passphrase | None:
    """This process's passphrase: `$TALARIA_RELAY_KEY_PASSPHRASE[_FILE]`, or None (keys plain)."""
    value, path = environ.get(PASSPHRASE_ENV), environ.get(PASSPHRASE_FILE_ENV)
    if value is not None and path is not None:
        raise InvalidInputError(f"set {PASSPHRASE_ENV} or {PASSPHRASE_FILE_ENV}, not both")
    if path is not None:
        return passphrase_from_file(path)
    return None if value is None else passphrase_from_env(PASSPHRASE_ENV, environ)


@dataclass(frozen=True, slots=True)
class Keyring:
    """Seals keys for storage under one passphrase (or none), and opens what is stored."""

    passphrase: Passphrase | None

    def seal(self, pem: str) -> str:
        """What to store for the checked PEM `pem`: encrypted under the passphrase if there is
        one; an encrypted PEM as it is (a copy carries it, no passphrase needed)."""
        if self.passphrase is None or pkcs8.is_encrypted(pem):
            return pem
        key = serialization.load_pem_private_key(pem.encode(), password=None)
        der = key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return pkcs8.encrypt(der, self.passphrase.secret())

    def resealer(self, target: Keyring) -> Callable[[str, str], str]:
        """(ref, stored PEM) -> the PEM opened with this keyring and sealed under `target`."""

        def reseal(ref: str, pem: str) -> str:
            stored = stored_pem(ref, pem)
            try:
                return target.seal(self.open(stored, ref))
            except KeyPassphraseError:
                # Already under `target`'s passphrase: a rekey cut short by a crash resumes.
                if target.passphrase is not None:
                    with contextlib.suppress(KeyPassphraseError):
                        target.open(stored, ref)
                        return stored
                raise

        return reseal

    def open(self, pem: str, ref: str) -> str:
        """The unencrypted PEM of the checked stored PEM `pem`, saved under `ref`;
        `KeyPassphraseError` when it is encrypted and there is no passphrase, or another one."""
        if not pkcs8.is_encrypted(pem):
            return pem
        if self.passphrase is None:
            raise KeyPassphraseError(
                f"Talaria publisher key {ref!r} is encrypted and {PASSPHRASE_ENV} is not set "
                f"(nor {PASSPHRASE_FILE_ENV})"
            )
        try:
            key = serialization.load_pem_private_key(pem.encode(), self.passphrase.secret())
        except ValueError:
            # cryptography says the same for a wrong passphrase and for a damaged key.
            raise KeyPassphraseError(
                f"Talaria publisher key {ref!r} does not open with the passphrase from "
                f"{self.passphrase.source} (a wrong passphrase, or a damaged key)"
            ) from None
        except (TypeError, UnsupportedAlgorithm) as error:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is unreadable") from error
        if not isinstance(key, Ed25519PrivateKey):
            raise CorruptStateError(f"Talaria publisher key {ref!r} is not an Ed25519 key")
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
