"""`forget_registration`, on every backend: the registration goes, compare-and-set like a save;
identities, keys and the revision floor stay; a later registration starts from none."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from relay.errors import StaleConfigError
from relay.store import ProfileGrant, RelayConfig, RelayStore

NOW = 1_800_000_000_000


def pem() -> str:
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


async def registered(store: RelayStore, relay: str = "https://relay.example") -> RelayConfig:
    identity = await store.profile_identity("default")
    ref = await store.save_key(f"key-{relay[-7:]}", pem())
    config = RelayConfig(
        relay, "https://hermes.example", f"key-{relay[-7:]}", ref,
        {"default": ProfileGrant(identity, "prf_default")},
    )  # fmt: skip
    await store.save_config(config)
    loaded = await store.load_config()
    assert loaded is not None
    return loaded


async def test_forgetting_leaves_no_registration_and_keeps_the_rest(store: RelayStore) -> None:
    """After a forget at the stored generation: no registration; the identity, the key (until
    deleted, which it now may be) and the revision floor are as they were."""
    config = await registered(store)
    identity = (await store.identities())["default"]
    await store.allocate_revisions(2, NOW)
    floor = await store.revision_floor()
    await store.forget_registration(expected_generation=config.generation)
    assert await store.load_config() is None
    assert await store.identities() == {"default": identity}
    assert await store.revision_floor() == floor
    assert await store.load_key(config.key_ref)
    assert await store.delete_key(config.key_ref)


async def test_a_stale_generation_forgets_nothing(store: RelayStore) -> None:
    """A registration saved since it was read is not forgotten: `StaleConfigError`, kept."""
    config = await registered(store)
    await store.save_config(config)  # another replica's save: a new generation
    with pytest.raises(StaleConfigError):
        await store.forget_registration(expected_generation=config.generation)
    assert await store.load_config() is not None


async def test_forgetting_nothing_is_no_error(store: RelayStore) -> None:
    """No registration: forgetting it (at generation 0, or unconditionally) changes nothing."""
    await store.forget_registration(expected_generation=0)
    await store.forget_registration(expected_generation=None)
    assert await store.load_config() is None


async def test_a_new_registration_after_a_forget(store: RelayStore) -> None:
    """Once forgotten, a registration is saved as onto an empty store (expected generation 0),
    with a generation the forgotten one never had."""
    first = await registered(store)
    await store.forget_registration(expected_generation=first.generation)
    ref = await store.save_key("key-2", pem())
    identity = (await store.identities())["default"]
    second = RelayConfig(
        "https://other.example", "https://hermes.example", "key-2", ref,
        {"default": ProfileGrant(identity, "prf_other")},
    )  # fmt: skip
    await store.save_config(second, expected_generation=0)
    loaded = await store.load_config()
    assert loaded == second
    assert loaded is not None
    assert loaded.generation != first.generation
