"""`RelayService.unpair()`: forget the registration, so the server pairs with another relay."""

from __future__ import annotations

from backends import MEMORY, on
from harness import relay_env

from relay.service import RelayService
from relay.store import RelayStore

pytestmark = on(MEMORY)


async def test_unpair_forgets_the_registration_and_its_key_so_pairing_starts_anew(
    store: RelayStore,
) -> None:
    """A registered server unpairs: its publisher stops, the registration and key are gone,
    the profile's identity stays; pairing again registers with a new key and scope."""
    async with relay_env(store) as env:
        await env.pair()
        before = await env.config()
        identity = (await store.identities())["default"]
        assert await env.service.unpair()
        assert env.service.current() is None
        assert await store.load_config() is None
        assert not await store.delete_key(before.key_ref)  # already gone
        assert (await store.identities())["default"] == identity
        assert not (await env.service.health()).registered

        await env.pair()
        after = await env.config()
        assert (after.key_id, after.profiles["default"].profile_id) != (
            before.key_id,
            before.profiles["default"].profile_id,
        )
        assert after.profiles["default"].identity == identity
        assert env.service.current() is not None
        assert not await env.service.unpair(if_relay_changed=True)  # this relay: kept
        assert await store.load_config() == after


async def test_unpair_if_the_relay_changed_before_start(store: RelayStore) -> None:
    """A service trusting another relay than the stored registration's forgets it before
    `start()`, then starts unregistered and pairs with its own relay; without a registration
    there is nothing to forget."""
    async with relay_env(store) as env:
        await env.pair()
        moved = RelayService(store, env.host, relay_url="https://relay2.example", http=env.http)
        assert await moved.unpair(if_relay_changed=True)
        assert await store.load_config() is None
        assert not await moved.start()
        assert not await moved.unpair()
        await moved.stop()
