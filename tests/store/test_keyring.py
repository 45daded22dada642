"""The key passphrase of the process, and the encrypted PKCS#8 envelope keys are stored in."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from key_support import PASSPHRASE, WRONG, ed25519_pem, pem_body

from relay.errors import InvalidInputError, KeyPassphraseError
from relay.store.keys import pkcs8
from relay.store.keys.keyring import (
    PASSPHRASE_ENV,
    PASSPHRASE_FILE_ENV,
    Keyring,
    Passphrase,
    configured_passphrase,
    passphrase_from_file,
)
from relay.store.keys.pkcs8 import _element

SECRET = PASSPHRASE.encode()


def scrypt_parameters(pem: str) -> tuple[int, int, int]:
    """(N, r, p) of an envelope `pkcs8.encrypt` wrote, read from its DER."""
    der = base64.b64decode("".join(pem.strip().splitlines()[1:-1]))
    _, start, _ = _element(der, 0)  # EncryptedPrivateKeyInfo
    _, start, _ = _element(der, start)  # its AlgorithmIdentifier
    _, _, oid_end = _element(der, start)  # PBES2
    _, start, _ = _element(der, oid_end)  # PBES2-params
    _, start, _ = _element(der, start)  # keyDerivationFunc
    _, _, oid_end = _element(der, start)  # id-scrypt
    _, start, _ = _element(der, oid_end)  # scrypt-params
    _, _, at = _element(der, start)  # salt
    values = []
    for _ in range(3):
        _, body, at = _element(der, at)
        values.append(int.from_bytes(der[body:at], "big"))
    return values[0], values[1], values[2]


def test_keys_are_sealed_with_scrypt_at_owasps_cost() -> None:
    """A sealed key is PBES2 with scrypt N=2^17, r=8, p=1, and cryptography opens it."""
    pem = ed25519_pem()
    sealed = Keyring(Passphrase(SECRET, "a test")).seal(pem)
    assert sealed.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    assert pem_body(pem) not in sealed.replace("\n", "")
    assert scrypt_parameters(sealed) == (2**17, 8, 1)
    opened = load_pem_private_key(sealed.encode(), SECRET)
    assert Keyring(Passphrase(SECRET, "a test")).open(sealed, "ref") == pem
    assert opened.public_key() == load_pem_private_key(pem.encode(), None).public_key()


OPENSSL = shutil.which("openssl")


@pytest.mark.skipif(OPENSSL is None, reason="no openssl command")
def test_openssl_opens_the_envelope(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The envelope is standard PKCS#8: `openssl pkcs8` opens it (below its 32 MiB scrypt cap)."""
    monkeypatch.setattr(pkcs8, "SCRYPT_LOG_N", 14)
    pem = ed25519_pem()
    path = tmp_path / "key.pem"
    path.write_text(Keyring(Passphrase(SECRET, "a test")).seal(pem))
    result = subprocess.run(
        [str(OPENSSL), "pkcs8", "-in", str(path), "-passin", f"env:{PASSPHRASE_ENV}"],
        capture_output=True,
        text=True,
        check=False,
        env={PASSPHRASE_ENV: PASSPHRASE},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == pem


@pytest.mark.parametrize(
    "text",
    [
        f"{pkcs8.BEGIN}\n{pkcs8.END}\n",
        f"{pkcs8.BEGIN}\nbm90IGEga2V5\n{pkcs8.END}\n",
        f"{pkcs8.BEGIN}\n!!!!\n{pkcs8.END}\n",
        f"{pkcs8.BEGIN}\nMAA=\n-----END PRIVATE KEY-----\n",
    ],
    ids=["empty", "not-der", "not-base64", "wrong-footer"],
)
def test_a_malformed_envelope_is_refused(text: str) -> None:
    """Only one PEM block holding an EncryptedPrivateKeyInfo passes the shape check."""
    with pytest.raises(ValueError, match="encrypted PKCS#8"):
        pkcs8.checked(text)


def test_a_wrong_or_missing_passphrase_is_a_clear_error_without_the_secret() -> None:
    """Opening needs the passphrase: the errors say so and name where it came from, not what."""
    sealed = Keyring(Passphrase(SECRET, "a test")).seal(ed25519_pem())
    with pytest.raises(KeyPassphraseError, match=f"encrypted and {PASSPHRASE_ENV} is not set"):
        Keyring(None).open(sealed, "ref-1")
    with pytest.raises(KeyPassphraseError, match="does not open with the passphrase from") as err:
        Keyring(Passphrase(WRONG.encode(), f"${PASSPHRASE_ENV}")).open(sealed, "ref-1")
    assert WRONG not in str(err.value)
    assert PASSPHRASE_ENV in str(err.value)


def test_a_passphrase_never_shows_in_its_repr() -> None:
    """repr and str of a passphrase name its source only."""
    phrase = Passphrase(SECRET, "the file /run/secrets/key")
    assert PASSPHRASE not in repr(phrase)
    assert PASSPHRASE not in str(phrase)
    assert "/run/secrets/key" in repr(phrase)
    assert PASSPHRASE not in repr(Keyring(phrase).passphrase)


def test_the_passphrase_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    """Unset: None; the variable; or the file, without one trailing newline."""
    assert configured_passphrase({}) is None
    found = configured_passphrase({PASSPHRASE_ENV: PASSPHRASE})
    assert found is not None
    assert found.secret() == SECRET
    path = tmp_path / "passphrase"
    path.write_bytes(SECRET + b"\n")
    found = configured_passphrase({PASSPHRASE_FILE_ENV: str(path)})
    assert found is not None
    assert found.secret() == SECRET
    path.write_bytes(SECRET + b"\n\n")
    assert passphrase_from_file(path).secret() == SECRET + b"\n"


def test_a_bad_passphrase_configuration_is_bad_input_naming_no_secret(tmp_path: Path) -> None:
    """Both set, an empty value or file, an unreadable file: `InvalidInputError`s, no content."""
    path = tmp_path / "passphrase"
    path.write_text(PASSPHRASE + "\n")
    with pytest.raises(InvalidInputError, match="not both"):
        configured_passphrase({PASSPHRASE_ENV: PASSPHRASE, PASSPHRASE_FILE_ENV: str(path)})
    with pytest.raises(InvalidInputError, match="is empty"):
        configured_passphrase({PASSPHRASE_ENV: ""})
    with pytest.raises(InvalidInputError, match="cannot read the key passphrase file") as err:
        configured_passphrase({PASSPHRASE_FILE_ENV: str(tmp_path)})  # a directory, even for root
    assert str(tmp_path) in str(err.value)
    missing = tmp_path / "missing"
    with pytest.raises(InvalidInputError, match=f"{missing}: No such file"):
        configured_passphrase({PASSPHRASE_FILE_ENV: str(missing)})
    path.write_text("\n")
    with pytest.raises(InvalidInputError, match="is empty") as err:
        configured_passphrase({PASSPHRASE_FILE_ENV: str(path)})
    assert PASSPHRASE not in str(err.value)
