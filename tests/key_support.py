"""Helpers for the keys-at-rest tests: passphrases in the environment, and keys as stored.

`raw_keys` reads what a store holds past the store itself (the JSON dir's files, the SQL rows),
so a test sees exactly what sits on disk.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import make_url

from relay.store.keys.keyring import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV

# Made-up passphrases that must never show in any output.
PASSPHRASE = "correct horse battery staple 7f3a"  # noqa: S105
OTHER = "Tr0ub4dor&3-other-9c1e"
WRONG = "not-the-passphrase-5d2b"

ENCRYPTED = "-----BEGIN ENCRYPTED PRIVATE KEY-----"

# The value in a stored row or file: (PEM, the SQL `encrypted` column, or None for a file).
Stored = tuple[str, bool | None]


def ed25519_pem() -> str:
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def use_passphrase(monkeypatch: pytest.MonkeyPatch, passphrase: str | None) -> None:
    """This process's key passphrase from now on (stores opened later read it)."""
    monkeypatch.delenv(PASSPHRASE_FILE_ENV, raising=False)
    if passphrase is None:
        monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    else:
        monkeypatch.setenv(PASSPHRASE_ENV, passphrase)


def file_facts(path: str | Path) -> tuple[str, int]:
    """A file's text and permission bits."""
    return Path(path).read_text(), Path(path).stat().st_mode & 0o777


def write_private(path: str | Path, text: str) -> None:
    """Write a 0600 file, as the JSON store does."""
    Path(path).write_text(text)
    os.chmod(path, 0o600)


def pem_body(pem: str) -> str:
    """The base64 of a PEM, on one line: what must not show anywhere once it is encrypted."""
    return "".join(line for line in pem.splitlines() if "-----" not in line)


async def raw_keys(url: str) -> dict[str, Stored]:
    """Every key the store at `url` holds, as stored, by reference (a JSON store: file name)."""
    parsed = make_url(url)
    if parsed.drivername == "json":
        return _key_files(Path(url.removeprefix("json://")))
    if parsed.drivername.startswith("sqlite"):
        with sqlite3.connect(str(parsed.database)) as conn:
            rows = conn.execute("SELECT ref, pem, encrypted FROM relay_keys").fetchall()
        return {ref: (pem, bool(encrypted)) for ref, pem, encrypted in rows}
    import asyncpg

    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch("SELECT ref, pem, encrypted FROM relay_keys")
    finally:
        await conn.close()
    return {row["ref"]: (row["pem"], row["encrypted"]) for row in rows}


def _key_files(state: Path) -> dict[str, Stored]:
    return {
        path.name: (path.read_text(), None)
        for path in sorted(state.glob("talaria-relay-publisher-*.pem"))
    }
