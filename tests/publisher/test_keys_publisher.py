"""The publisher with its key encrypted at rest: it signs as before, and without the passphrase
it stays off with one clear ERROR line that never holds a secret."""

from __future__ import annotations

import logging

import pytest
from backends import REAL, on
from harness import RELAY_URL, Env, relay_env
from key_support import ENCRYPTED, PASSPHRASE, WRONG, pem_body, raw_keys, use_passphrase

from relay import PublisherOptions
from relay.publishing.fingerprint import fingerprint
from relay.service import RelayService
from relay.store import RelayStore, open_store
from relay.store.keys.keyring import PASSPHRASE_ENV, Keyring

# A restart reopens the store, and the stored key is read past it: the real backends.
pytestmark = [pytest.mark.usefixtures("fast_scrypt"), on(*REAL)]


def service_on(env: Env, store: RelayStore) -> RelayService:
    """A restarted web app's service on `store`, logging to the `relay` loggers."""
    return RelayService(
        store,
        env.host,
        relay_url=RELAY_URL,
        http=env.http,
        clock=env.clock,
        publishing=PublisherOptions(background=False),
    )


async def test_a_publisher_paired_under_a_passphrase_signs_with_its_encrypted_key(
    store_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Pairing stores the key encrypted; the relay verifies what the publisher signs; a restart
    without the passphrase logs one ERROR naming the variable; with it, publishing resumes."""
    caplog.set_level(logging.DEBUG)
    use_passphrase(monkeypatch, PASSPHRASE)
    async with open_store(store_url) as store, relay_env(store) as env:
        await env.pair()
        env.host.create_session("chat-1", "default", "First")
        env.host.start_run("chat-1")
        assert await env.publish() is None
        assert env.accepted("snapshot")
        [(stored, _)] = (await raw_keys(store_url)).values()
        assert stored.startswith(ENCRYPTED)
        plain = await store.load_key((await env.config()).key_ref)
        assert pem_body(plain) not in stored.replace("\n", "")

        for passphrase, line in [
            (None, f"is encrypted and {PASSPHRASE_ENV} is not set"),
            (WRONG, f"does not open with the passphrase from ${PASSPHRASE_ENV}"),
        ]:
            use_passphrase(monkeypatch, passphrase)
            caplog.clear()
            async with open_store(store_url) as locked:
                service = service_on(env, locked)
                assert await service.start() is False
                assert service.current() is None
            [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert record.levelno == logging.ERROR
            assert record.getMessage().startswith("[relay] Talaria relay publisher disabled: ")
            assert line in record.getMessage()
            assert record.exc_info is None

        use_passphrase(monkeypatch, PASSPHRASE)
        async with open_store(store_url) as unlocked:
            service = service_on(env, unlocked)
            assert await service.start()
            env.host.create_session("chat-2", "default", "Second")
            env.host.start_run("chat-2")
            publisher = service.current()
            assert publisher is not None
            assert await publisher.run_once() is None
            await service.stop()
        assert len(env.accepted("snapshot")) >= 2
    logged = caplog.text + "\n".join(env.logs)
    for secret in (PASSPHRASE, WRONG, pem_body(plain)):
        assert secret not in logged


async def test_the_operator_page_shows_an_encrypted_keys_fingerprint_without_opening_it(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the key encrypted, a gather takes the fingerprint from the key the publisher holds:
    no second opening (a scrypt derivation each), and the fingerprint is the stored key's."""
    use_passphrase(monkeypatch, PASSPHRASE)
    async with open_store(store_url) as store, relay_env(store) as env:
        await env.pair()
        config = await env.config()
        expected = fingerprint(await store.load_key(config.key_ref))
        opened: list[str] = []
        opening = Keyring.open

        def counted(keyring: Keyring, pem: str, ref: str) -> str:
            opened.append(ref)
            return opening(keyring, pem, ref)

        monkeypatch.setattr(Keyring, "open", counted)
        registration = (await env.service.operator_facts())["registration"]
        assert (registration["key_fingerprint"], registration["key_encrypted"]) == (expected, True)
        assert opened == []
