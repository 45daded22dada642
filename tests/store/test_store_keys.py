"""Keys at rest on every backend: encrypted under the process's passphrase, rekeyed all at once.

A passphrase is configuration of the process, read when a store first handles a key, so each
test opens its stores after setting it. The tests of one open store run on every backend; those
that reopen a store, or read what is stored past it (`raw_keys`), on the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import ALL, REAL, on
from key_support import (
    ENCRYPTED,
    OTHER,
    PASSPHRASE,
    WRONG,
    ed25519_pem,
    file_facts,
    pem_body,
    raw_keys,
    use_passphrase,
    write_private,
)

from relay.errors import CorruptStateError, InvalidInputError, KeyPassphraseError
from relay.store import RelayStore, open_store
from relay.store.keys.keyring import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV, Keyring, Passphrase

pytestmark = [pytest.mark.usefixtures("fast_scrypt"), on(*REAL)]


def phrase(text: str) -> Passphrase:
    return Passphrase(text.encode(), "a test")


async def save(url: str, *pems: str) -> list[str]:
    """Save `pems` under this process's passphrase, as keys key-0, key-1, …; their references."""
    async with open_store(url) as store:
        return [await store.save_key(f"key-{i}", pem) for i, pem in enumerate(pems)]


# ── one open store, every backend ─────────────────────────────────────────────


@on(*ALL)
async def test_one_store_seals_opens_and_rekeys_its_keys(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stored_key gives the PEM as stored, load_key the key; rekey moves every key, and this
    store then opens them under the new passphrase."""
    use_passphrase(monkeypatch, PASSPHRASE)  # read at the store's first key
    pems = [ed25519_pem(), ed25519_pem()]
    refs = [await store.save_key(f"key-{i}", pem) for i, pem in enumerate(pems)]
    sealed = [await store.stored_key(ref) for ref in refs]
    assert all(pem.startswith(ENCRYPTED) for pem in sealed)
    for pem, text in zip(pems, sealed, strict=True):
        assert pem_body(pem) not in text.replace("\n", "")
    assert [await store.load_key(ref) for ref in refs] == pems

    assert await store.rekey(phrase(OTHER)) == 2
    moved = [await store.stored_key(ref) for ref in refs]
    assert all(a != b and b.startswith(ENCRYPTED) for a, b in zip(sealed, moved, strict=True))
    assert [await store.load_key(ref) for ref in refs] == pems
    assert await store.rekey(None) == 2
    assert [await store.stored_key(ref) for ref in refs] == pems


@on(*ALL)
async def test_one_store_rekeys_all_or_nothing_and_resumes(store: RelayStore) -> None:
    """A key the current passphrase does not open fails the rekey, every key unchanged; one under
    the new passphrase already (a rekey cut short) is kept as it is."""
    under_other = Keyring(phrase(OTHER)).seal(ed25519_pem())
    under_wrong = Keyring(phrase(WRONG)).seal(ed25519_pem())
    plain = await store.save_key("key-plain", ed25519_pem())
    done = await store.save_key("key-done", under_other)
    bad = await store.save_key("key-bad", under_wrong)
    refs = [plain, done, bad]
    before = [await store.stored_key(ref) for ref in refs]
    for passphrase in (phrase(OTHER), None):
        with pytest.raises(KeyPassphraseError):
            await store.rekey(passphrase)
        assert [await store.stored_key(ref) for ref in refs] == before

    assert await store.delete_key(bad)
    assert await store.rekey(phrase(OTHER)) == 2
    assert await store.stored_key(done) == under_other
    assert (await store.stored_key(plain)).startswith(ENCRYPTED)


# ── reopened stores, and what is stored ──────────────────────────────────────


async def test_a_key_saved_under_a_passphrase_is_stored_encrypted(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a passphrase, the stored PEM is encrypted PKCS#8 and `load_key` gives the key back."""
    pem = ed25519_pem()
    use_passphrase(monkeypatch, PASSPHRASE)
    [ref] = await save(store_url, pem)
    [(stored, flag)] = (await raw_keys(store_url)).values()
    assert stored.startswith(ENCRYPTED)
    assert pem_body(pem) not in stored.replace("\n", "")
    assert flag in (None, True)  # the SQL column says so too
    async with open_store(store_url) as store:
        assert await store.load_key(ref) == pem
        assert await store.stored_key(ref) == stored


async def test_without_a_passphrase_keys_stay_unencrypted(store_url: str) -> None:
    """No passphrase: the key is stored as given, as before."""
    pem = ed25519_pem()
    await save(store_url, pem)
    assert list((await raw_keys(store_url)).values()) == [
        (pem, None if store_url.startswith("json") else False)
    ]


async def test_a_missing_or_wrong_passphrase_is_a_clear_error_and_changes_nothing(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encrypted key without its passphrase: `KeyPassphraseError`, no secret, nothing changed."""
    use_passphrase(monkeypatch, PASSPHRASE)
    [ref] = await save(store_url, ed25519_pem())
    before = await raw_keys(store_url)
    use_passphrase(monkeypatch, None)
    async with open_store(store_url) as store:
        with pytest.raises(KeyPassphraseError, match=f"{PASSPHRASE_ENV} is not set"):
            await store.load_key(ref)
        assert (await store.stored_key(ref)).startswith(ENCRYPTED)
    use_passphrase(monkeypatch, WRONG)
    async with open_store(store_url) as store:
        with pytest.raises(KeyPassphraseError, match="does not open") as err:
            await store.load_key(ref)
        with pytest.raises(KeyPassphraseError):
            await store.rekey(None)
    assert WRONG not in str(err.value)
    assert PASSPHRASE not in str(err.value)
    assert await raw_keys(store_url) == before


async def test_the_passphrase_may_come_from_a_file(
    store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`TALARIA_RELAY_KEY_PASSPHRASE_FILE` names a file holding the same passphrase."""
    use_passphrase(monkeypatch, PASSPHRASE)
    pem = ed25519_pem()
    [ref] = await save(store_url, pem)
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n")
    use_passphrase(monkeypatch, None)
    monkeypatch.setenv(PASSPHRASE_FILE_ENV, str(secret))
    async with open_store(store_url) as store:
        assert await store.load_key(ref) == pem
    monkeypatch.setenv(PASSPHRASE_FILE_ENV, str(tmp_path / "absent"))
    async with open_store(store_url) as store:
        with pytest.raises(InvalidInputError, match="cannot read the key passphrase file"):
            await store.load_key(ref)


async def test_an_encrypted_key_is_saved_as_it_is(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PEM encrypted already is stored unchanged, with or without a passphrase here."""
    pem = ed25519_pem()
    use_passphrase(monkeypatch, OTHER)
    async with open_store(store_url) as store:
        sealed = await store.stored_key(await store.save_key("key-a", pem))
    for passphrase in (None, PASSPHRASE):
        use_passphrase(monkeypatch, passphrase)
        [ref] = await save(store_url, sealed)
        async with open_store(store_url) as store:
            assert await store.stored_key(ref) == sealed


async def test_rekey_encrypts_reencrypts_and_decrypts_every_key(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rekey moves every key to the new passphrase (or none); each opens with that one only."""
    pems = [ed25519_pem(), ed25519_pem()]
    refs = await save(store_url, *pems)
    async with open_store(store_url) as store:
        assert await store.rekey(phrase(PASSPHRASE)) == 2
        assert [await store.load_key(ref) for ref in refs] == pems  # the handle follows
    stored = await raw_keys(store_url)
    assert all(pem.startswith(ENCRYPTED) and flag is not False for pem, flag in stored.values())

    use_passphrase(monkeypatch, PASSPHRASE)
    async with open_store(store_url) as store:
        assert await store.rekey(phrase(OTHER)) == 2
    reencrypted = await raw_keys(store_url)
    assert all(reencrypted[ref][0] != stored[ref][0] for ref in stored)
    async with open_store(store_url) as store:
        with pytest.raises(KeyPassphraseError):
            await store.load_key(refs[0])

    use_passphrase(monkeypatch, OTHER)
    async with open_store(store_url) as store:
        assert [await store.load_key(ref) for ref in refs] == pems
        assert await store.rekey(None) == 2
    assert sorted(pem for pem, _ in (await raw_keys(store_url)).values()) == sorted(pems)


async def test_a_rekey_that_fails_on_one_key_changes_none(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One key the current passphrase does not open: `KeyPassphraseError`, every key unchanged."""
    use_passphrase(monkeypatch, PASSPHRASE)
    await save(store_url, ed25519_pem(), ed25519_pem())
    use_passphrase(monkeypatch, WRONG)
    async with open_store(store_url) as store:
        # Under another passphrase, and rekeyed last (refs are sorted): the others come first.
        ref = await store.save_key("key-bad-1", ed25519_pem())
    assert sorted(await raw_keys(store_url))[-1] == Path(ref).name
    before = await raw_keys(store_url)
    use_passphrase(monkeypatch, PASSPHRASE)
    async with open_store(store_url) as store:
        with pytest.raises(KeyPassphraseError):
            await store.rekey(phrase(OTHER))
        with pytest.raises(KeyPassphraseError):
            await store.rekey(None)
    assert await raw_keys(store_url) == before


async def test_a_rekey_cut_short_resumes(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys under the new passphrase already (a crash mid-rekey) are kept; the rest move."""
    use_passphrase(monkeypatch, OTHER)
    [done] = await save(store_url, ed25519_pem())
    done_pem = (await raw_keys(store_url)).popitem()[1][0]
    use_passphrase(monkeypatch, PASSPHRASE)
    pem = ed25519_pem()
    async with open_store(store_url) as store:
        ref = await store.save_key("key-late", pem)
        assert await store.rekey(phrase(OTHER)) == 2
        assert await store.load_key(ref) == pem
        assert await store.stored_key(done) == done_pem


@pytest.mark.json
async def test_a_damaged_stored_key_is_corrupt_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored key that is no PKCS#8 any more: `CorruptStateError`, and rekey changes nothing."""
    store_url = f"json://{tmp_path / 'state'}"
    use_passphrase(monkeypatch, PASSPHRASE)
    [ref] = await save(store_url, ed25519_pem())
    write_private(ref, f"{ENCRYPTED}\nbm90IGEga2V5\n-----END ENCRYPTED PRIVATE KEY-----\n")
    before = await raw_keys(store_url)
    async with open_store(store_url) as store:
        with pytest.raises(CorruptStateError, match="unreadable"):
            await store.load_key(ref)
        with pytest.raises(CorruptStateError):
            await store.rekey(phrase(OTHER))
    assert await raw_keys(store_url) == before


@pytest.mark.json
async def test_an_encrypted_json_key_is_a_private_file_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON store keeps the legacy file name, 0600, and still reads a legacy plain PEM."""
    state = tmp_path / "state"
    legacy = ed25519_pem()
    [plain] = await save(f"json://{state}", legacy)
    use_passphrase(monkeypatch, PASSPHRASE)
    [ref] = await save(f"json://{state}", ed25519_pem())
    assert ref == plain  # key-0 both times: one file name, now encrypted
    assert Path(ref).name.startswith("talaria-relay-publisher-")
    text, mode = file_facts(ref)
    assert text.startswith(ENCRYPTED)
    assert mode == 0o600
    other = state / "talaria-relay-publisher-0123456789abcdef.pem"
    write_private(other, legacy)
    async with open_store(f"json://{state}") as store:
        assert await store.load_key(str(other)) == legacy
        assert await store.rekey(phrase(OTHER)) == 2
    text, mode = file_facts(other)
    assert text.startswith(ENCRYPTED)
    assert mode == 0o600
    assert sorted(await raw_keys(f"json://{state}")) == sorted([Path(ref).name, other.name])
