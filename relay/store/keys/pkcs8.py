"""Encrypted PKCS#8 under a passphrase, with scrypt: how a publisher key is kept at rest.

Why not `BestAvailableEncryption`: for PKCS#8, `cryptography` (checked on 50.0) writes PBES2 with
PBKDF2-HMAC-SHA256 at 2048 iterations, cheap to guess passphrases against, and its encryption
builder takes no rounds for PKCS#8. The strongest scheme PKCS#8 has is PBES2 with scrypt
(RFC 8018 §6.2, RFC 7914 §7), which `cryptography` reads but does not write. So this module
writes that envelope, one fixed DER shape, with `cryptography`'s own scrypt and AES-256-CBC, and
leaves all reading (and so all parsing of untrusted bytes) to `load_pem_private_key`. OpenSSL
writes the same shape (`openssl pkcs8 -topk8 -scrypt`).
"""

from __future__ import annotations

import base64
import os
import textwrap

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

BEGIN = "-----BEGIN ENCRYPTED PRIVATE KEY-----"
END = "-----END ENCRYPTED PRIVATE KEY-----"

# scrypt at N = 2^17, r = 8, p = 1: OWASP's floor for scrypt; 128 MiB and about 0.3 s a key.
# Keys are opened on start and on a registration change only, so the cost is paid rarely.
# (`openssl pkcs8` caps scrypt at 32 MiB and cannot open these: `talaria-relay rekey --decrypt`.)
SCRYPT_LOG_N = 17
SCRYPT_R = 8
SCRYPT_P = 1

# DER object identifiers, encoded.
_PBES2 = bytes.fromhex("06092a864886f70d01050d")  # 1.2.840.113549.1.5.13
_SCRYPT = bytes.fromhex("06092b06010401da47040b")  # 1.3.6.1.4.1.11591.4.11
_AES256_CBC = bytes.fromhex("060960864801650304012a")  # 2.16.840.1.101.3.4.1.42

_SEQUENCE, _OCTETS, _INTEGER = 0x30, 0x04, 0x02


def is_encrypted(pem: str) -> bool:
    """Whether `pem` is an encrypted PKCS#8 PEM (by its label; `checked` says if it is one)."""
    return pem.lstrip().startswith(BEGIN)


def encrypt(der: bytes, passphrase: bytes) -> str:
    """The PEM of the PKCS#8 DER `der`, encrypted under `passphrase` (scrypt, AES-256-CBC)."""
    salt, iv = os.urandom(16), os.urandom(16)
    n = 2**SCRYPT_LOG_N
    key = Scrypt(salt=salt, length=32, n=n, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase)
    padder = padding.PKCS7(128).padder()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    sealed = encryptor.update(padder.update(der) + padder.finalize()) + encryptor.finalize()
    scrypt_params = _tlv(
        _SEQUENCE, _tlv(_OCTETS, salt) + _integer(n) + _integer(SCRYPT_R) + _integer(SCRYPT_P)
    )
    pbes2_params = _tlv(
        _SEQUENCE,
        _tlv(_SEQUENCE, _SCRYPT + scrypt_params) + _tlv(_SEQUENCE, _AES256_CBC + _tlv(_OCTETS, iv)),
    )
    info = _tlv(_SEQUENCE, _tlv(_SEQUENCE, _PBES2 + pbes2_params) + _tlv(_OCTETS, sealed))
    body = "\n".join(textwrap.wrap(base64.b64encode(info).decode(), 64))
    return f"{BEGIN}\n{body}\n{END}\n"


def checked(pem: str) -> str:
    """`pem` if it is one PEM block holding an `EncryptedPrivateKeyInfo`, else `ValueError`: only
    its shape is checked, what it holds shows once a passphrase opens it."""
    lines = pem.strip().splitlines()
    if len(lines) < 3 or lines[0] != BEGIN or lines[-1] != END:
        raise ValueError("not one encrypted PKCS#8 PEM block")
    try:
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
        tag, start, end = _element(der, 0)
        algorithm = _element(der, start)
        data = _element(der, algorithm[2])
    except (ValueError, IndexError):  # binascii.Error is a ValueError
        raise ValueError("not an encrypted PKCS#8 key") from None
    shape = (tag, algorithm[0], data[0], end, data[2])
    if shape != (_SEQUENCE, _SEQUENCE, _OCTETS, len(der), len(der)):
        raise ValueError("not an encrypted PKCS#8 key")
    return pem


def _tlv(tag: int, body: bytes) -> bytes:
    size = len(body)
    if size < 0x80:
        return bytes([tag, size]) + body
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + body


def _integer(value: int) -> bytes:
    # Positive, so one more byte than its bits need keeps the sign bit clear.
    return _tlv(_INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, where its contents start, where they end) of the DER element at `at`."""
    tag, size, start = der[at], der[at + 1], at + 2
    if size >= 0x80:
        count = size & 0x7F
        if not 1 <= count <= 3:
            raise ValueError("an unreasonable DER length")
        size, start = int.from_bytes(der[start : start + count], "big"), start + count
    if start + size > len(der):
        raise ValueError("a DER element runs past its end")
    return tag, start, start + size
