"""`talaria-relay rekey`, and `status` and `import` with keys encrypted at rest, in subprocesses.

Passphrases reach the command only through its environment or a file, never its arguments, and
no run prints one, or a private key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from backends import REAL, on
from cli_support import Result, run
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from harness import PUBLISHER_ID, RELAY_URL
from key_support import (
    ENCRYPTED,
    OTHER,
    PASSPHRASE,
    WRONG,
    ed25519_pem,
    pem_body,
    raw_keys,
    use_passphrase,
)

from relay.publishing.fingerprint import fingerprint
from relay.store import ProfileGrant, RelayConfig, open_store
from relay.store.keys.keyring import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV

# Keys sealed in this process cost little; the command runs at the real cost. Each command is a
# process of its own, so it sees only a real store.
pytestmark = [pytest.mark.usefixtures("fast_scrypt"), on(*REAL)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "xdg"
    path.mkdir()
    return path


def cli(home: Path, code: int, *args: str, **env: str) -> Result:
    """Run the command; check its exit code, and that it printed no secret and no traceback."""
    result = run(home, *args, env=env, timeout=60)
    assert result.code == code, result.describe()
    assert "Traceback" not in result.output, result.describe()
    for secret in (PASSPHRASE, OTHER, WRONG):
        assert secret not in result.output, result.describe()
    assert "PRIVATE KEY-----" not in result.output, result.describe()
    return result


async def register(url: str, pem: str) -> str:
    """A registration in the store at `url` naming the key `pem`, with its profile's identity
    (an import stops without it); the key's reference."""
    async with open_store(url) as store:
        ref = await store.save_key("key-1", pem)
        grant = ProfileGrant(await store.profile_identity("default"), "prf_default")
        await store.save_config(
            RelayConfig(RELAY_URL, PUBLISHER_ID, "key-1", ref, {"default": grant})
        )
    return ref


def registration(home: Path, url: str, **env: str) -> dict[str, Any]:
    document = json.loads(cli(home, 0, "status", "--json", "--store", url, **env).stdout)
    return document["registration"]  # type: ignore[no-any-return]


async def test_rekey_encrypts_reencrypts_and_decrypts(
    home: Path, store_url: str, tmp_path: Path
) -> None:
    """rekey from plain to a passphrase in a variable, to one in a file, back to plain; status
    says which, and shows the fingerprint only when the passphrase is given."""
    pem = ed25519_pem()
    await register(store_url, pem)
    expected = fingerprint(pem)
    assert registration(home, store_url)["key_encrypted"] is False

    done = cli(home, 0, "rekey", "--store", store_url, "--to-passphrase-env", "NEW", NEW=PASSPHRASE)
    assert "1 key(s), all stored encrypted under $NEW" in done.stdout
    [(stored, _)] = (await raw_keys(store_url)).values()
    assert stored.startswith(ENCRYPTED)
    assert pem_body(pem) not in stored.replace("\n", "")
    assert load_pem_private_key(stored.encode(), PASSPHRASE.encode()).public_key()

    locked = registration(home, store_url)
    assert (locked["key_encrypted"], locked["key_fingerprint"]) == (True, None)
    text = cli(home, 0, "status", "--store", store_url).stdout
    assert f"key-1  encrypted: {PASSPHRASE_ENV} is not set, or does not open it" in text
    opened = registration(home, store_url, **{PASSPHRASE_ENV: PASSPHRASE})
    assert (opened["key_encrypted"], opened["key_fingerprint"]) == (True, expected)
    text = cli(home, 0, "status", "--store", store_url, **{PASSPHRASE_ENV: PASSPHRASE}).stdout
    assert f"key-1  {expected}  (encrypted)" in text

    secret = tmp_path / "new-passphrase"
    secret.write_text(OTHER + "\n")
    cli(
        home,
        0,
        "rekey",
        "--store",
        store_url,
        "--to-passphrase-file",
        str(secret),
        **{PASSPHRASE_ENV: PASSPHRASE},
    )
    [(again, _)] = (await raw_keys(store_url)).values()
    assert load_pem_private_key(again.encode(), OTHER.encode()).public_key()

    done = cli(
        home, 0, "rekey", "--store", store_url, "--decrypt", **{PASSPHRASE_FILE_ENV: str(secret)}
    )
    assert "1 key(s), all stored unencrypted" in done.stdout
    assert [pem for pem, _ in (await raw_keys(store_url)).values()] == [pem]
    text = cli(home, 0, "status", "--store", store_url).stdout
    assert f"key-1  {expected}  (not encrypted)" in text


async def test_rekey_without_the_right_passphrase_exits_1_and_changes_nothing(
    home: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encrypted key and a missing or wrong current passphrase: exit 1, a clear message."""
    use_passphrase(monkeypatch, PASSPHRASE)
    await register(store_url, ed25519_pem())
    use_passphrase(monkeypatch, None)
    before = await raw_keys(store_url)
    failed = cli(home, 1, "rekey", "--store", store_url, "--decrypt")
    assert f"is encrypted and {PASSPHRASE_ENV} is not set" in failed.stderr
    failed = cli(
        home,
        1,
        "rekey",
        "--store",
        store_url,
        "--to-passphrase-env",
        "NEW",
        NEW=OTHER,
        **{PASSPHRASE_ENV: WRONG},
    )
    assert f"does not open with the passphrase from ${PASSPHRASE_ENV}" in failed.stderr
    assert await raw_keys(store_url) == before


@pytest.mark.json
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments"),
        (["--decrypt", "--to-passphrase-env", "NEW"], "not allowed with"),
        (["--to-passphrase-env", "UNSET_VARIABLE"], "UNSET_VARIABLE is not set"),
        (["--to-passphrase-env", "EMPTY"], "from $EMPTY is empty"),
        (["--to-passphrase-file", "/nonexistent/passphrase"], "/nonexistent/passphrase"),
    ],
    ids=["no-target", "two-targets", "unset", "empty", "unreadable-file"],
)
async def test_rekey_usage_errors_exit_2_and_change_nothing(
    home: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    """A missing or doubled target, an unset or empty variable, an unreadable file: exit 2."""
    url = f"json://{tmp_path / 'state'}"
    await register(url, ed25519_pem())
    before = await raw_keys(url)
    failed = cli(home, 2, "rekey", "--store", url, *args, EMPTY="")
    assert message in failed.stderr
    assert await raw_keys(url) == before


@pytest.mark.json
def test_rekey_of_a_missing_store_creates_none(home: Path, tmp_path: Path) -> None:
    """A JSON state dir that does not exist is bad input; rekey does not create it."""
    failed = cli(home, 2, "rekey", "--store", f"json://{tmp_path / 'absent'}", "--decrypt")
    assert "nothing created" in failed.stderr
    assert not (tmp_path / "absent").exists()


@pytest.mark.json
@pytest.mark.sqlite
async def test_import_carries_an_encrypted_key_as_it_is(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encrypted key is copied byte for byte, without the passphrase, and opens there."""
    source, target = f"json://{tmp_path / 'state'}", f"sqlite:///{tmp_path / 'copy.db'}"
    use_passphrase(monkeypatch, PASSPHRASE)
    pem = ed25519_pem()
    await register(source, pem)
    use_passphrase(monkeypatch, None)
    cli(home, 0, "import", "--from", source, "--to", target)
    [(copied, flag)] = (await raw_keys(target)).values()
    assert [copied] == [stored for stored, _ in (await raw_keys(source)).values()]
    assert flag is True
    use_passphrase(monkeypatch, PASSPHRASE)
    async with open_store(target) as store:
        config = await store.load_config()
        assert config is not None
        assert await store.load_key(config.key_ref) == pem
