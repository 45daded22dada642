"""A profile's identity is minted only once the relay accepted its pairing."""

from __future__ import annotations

import pytest
from backends import MEMORY, on
from harness import relay_env

from relay.errors import RelayPairingError
from relay.store import RelayStore

pytestmark = on(MEMORY)


async def test_a_refused_registration_mints_no_identity(store: RelayStore) -> None:
    """The relay refusing the server's registration leaves no identity behind."""
    async with relay_env(store) as env:
        env.wire.answer("publisher_redeem", 403, {"error": "invitation_invalid"})
        with pytest.raises(RelayPairingError):
            await env.pair("default")
        assert await store.identities() == {}
        assert await store.load_config() is None


async def test_a_refused_enrollment_mints_no_identity(store: RelayStore) -> None:
    """The relay refusing a new profile's enrollment mints no identity for that profile."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair("default")
        env.wire.answer("profile_redeem", 403, {"error": "invitation_invalid"})
        with pytest.raises(RelayPairingError):
            await env.pair("work", user="usr_work")
        assert set(await store.identities()) == {"default"}
        assert list((await env.config()).profiles) == ["default"]


async def test_an_accepted_enrollment_mints_the_identity_it_saves(store: RelayStore) -> None:
    """Once the relay accepts, the grant names the identity the store now holds."""
    async with relay_env(store, profiles=("default", "work")) as env:
        await env.pair("default")
        await env.pair("work", user="usr_work")
        grants = (await env.config()).profiles
        assert {p: g.identity for p, g in grants.items()} == await store.identities()
