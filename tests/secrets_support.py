"""Secrets a test handles, and the check that none of them reached a log line or an output.

`SecretWatch.install` learns the secrets as they are made: every key pairing generates, every
invitation a dev relay mints, every signature the client computes. The test adds those it knows
besides (a database password, the key passphrase, a key read back from a store). The watch also
keeps every line the publisher and service report, whether to a `log` callable or to logging,
and the message of every `RelayError` made, since a pairing error's message goes back to the web
app's caller. `assert_clean` then looks for each secret, in each form it could be written in.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

import relay.pairing
from relay.client import TalariaAuth
from relay.errors import RelayError
from relay.publishing.logs import Reporter
from relay.testing import DevRelay

SIGNATURE_HEADER = "X-Talaria-Signature"  # as relay/client.py sets it
PASSPHRASE = "pass-phrase-7e41c0b2-never-printed"  # noqa: S105 (made up, must never be printed)
DB_PASSWORD = "S3cretPw-db-91f3"  # noqa: S105 (made up, must never be printed)


def _b64_forms(data: bytes) -> set[str]:
    """`data` in base64 and base64url, padded or not, and in hex of either case."""
    forms = {base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()}
    forms |= {form.rstrip("=") for form in forms}
    return forms | {data.hex(), data.hex().upper()}


@dataclass
class SecretWatch:
    """The secrets a test handled, each with the forms it could be written in, and what the
    library said meanwhile."""

    forms: dict[str, str] = field(default_factory=dict)  # a written form -> what it is
    kinds: dict[str, int] = field(default_factory=dict)  # what it is -> how many were seen
    lines: list[str] = field(default_factory=list)

    def add(self, kind: str, forms: Iterable[str]) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        for form in forms:
            self.forms.setdefault(form, kind)

    def add_key(self, key: Ed25519PrivateKey) -> None:
        """A private key: its PEM, each base64 line of it, the DER and the raw key bytes."""
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
        body = [line for line in pem.splitlines() if line and "-----" not in line]
        der = key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
        raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        self.add("private key", {pem, pem.strip(), "".join(body), *body})
        self.add("private key", _b64_forms(der) | _b64_forms(raw))

    def add_pem(self, pem: str) -> None:
        key = load_pem_private_key(pem.encode(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        self.add_key(key)
        self.add("private key", {pem, pem.strip()})  # as stored, should it differ

    def add_signature(self, value: str) -> None:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        self.add("signature", {value} | _b64_forms(raw))

    def add_password(self, password: str) -> None:
        """A database password, as given and as it stands in a URL."""
        self.add("database password", {password, quote(password, safe="")})

    def leaks(self, text: str) -> dict[str, str]:
        """Each secret form found in `text` (with lines joined, as a wrapped PEM would be)."""
        joined = text.replace("\r", "").replace("\n", "")
        found = (form for form in self.forms if form in text or form in joined)
        return {form[:12] + "…": self.forms[form] for form in found}

    def assert_clean(self, *texts: str, where: str = "output") -> None:
        for text in texts:
            found = self.leaks(text)
            assert not found, f"secrets in the {where}: {found}\n--- {where} ---\n{text}"

    # ── learning secrets as the library makes them ───────────────────────────

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        watch = self
        make_key = Ed25519PrivateKey.generate

        class Keys:
            """What `relay.pairing` sees as the key class: it only ever calls `generate`."""

            @staticmethod
            def generate() -> Ed25519PrivateKey:
                key = make_key()
                watch.add_key(key)
                return key

        monkeypatch.setattr(relay.pairing, "Ed25519PrivateKey", Keys)

        mint = DevRelay.mint_invitation

        def minted(relay_: DevRelay, *args: Any, **kwargs: Any) -> str:
            token = mint(relay_, *args, **kwargs)
            watch.add("invitation", {token})
            return token

        monkeypatch.setattr(DevRelay, "mint_invitation", minted)

        sign = TalariaAuth.auth_flow

        def signed(
            auth: TalariaAuth, request: httpx.Request
        ) -> Generator[httpx.Request, httpx.Response, None]:
            flow = sign(auth, request)
            outgoing = next(flow)
            while True:
                watch.add_signature(outgoing.headers[SIGNATURE_HEADER])
                response = yield outgoing
                try:
                    outgoing = flow.send(response)
                except StopIteration:
                    return

        monkeypatch.setattr(TalariaAuth, "auth_flow", signed)

        emit = Reporter._emit

        def reported(reporter: Reporter, level: int, line: str, *args: Any) -> None:
            watch.lines.append(line)
            emit(reporter, level, line, *args)

        monkeypatch.setattr(Reporter, "_emit", reported)

        made = RelayError.__init__

        def error(exc: RelayError, *args: Any, **kwargs: Any) -> None:
            made(exc, *args, **kwargs)
            watch.lines.append(str(exc))

        monkeypatch.setattr(RelayError, "__init__", error)


# ── the relay's side ─────────────────────────────────────────────────────────


def verify(
    public_key: Ed25519PublicKey,
    method: str,
    raw_path: bytes,
    headers: httpx.Headers,
    body: bytes,
) -> None:
    """Check a request's signature as the relay does, over what arrived, with a canonical string
    rebuilt here rather than by `relay.protocol`; raises `InvalidSignature` on a mismatch."""
    path = raw_path.partition(b"?")[0]
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=")
    fields = [method.encode(), path]
    fields += [headers["x-talaria-timestamp"].encode(), headers["x-talaria-nonce"].encode(), digest]
    signature = headers["x-talaria-signature"]
    assert "=" not in signature
    public_key.verify(
        base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)), b"\n".join(fields)
    )
