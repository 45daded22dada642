"""The validation gate on every backend: defects that once got past the store's checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import DeletedScope, RelayStore, open_store

NOW = 1_800_000_000_000


async def test_a_string_is_not_a_list_of_scopes(store: RelayStore) -> None:
    """`track_started("abc", …)` is refused instead of tracking scopes "a", "b" and "c"."""
    with pytest.raises(InvalidInputError, match="profile_ids"):
        await store.track_started("abc", NOW)
    assert await store.started_ledger() == []


@pytest.mark.parametrize("count", [2**53, 2**63, -1, True, 1.0])
async def test_a_count_out_of_range_hands_out_nothing(store: RelayStore, count: object) -> None:
    """A count that is not a small non-negative integer is refused and the floor stays."""
    await store.allocate_revisions(1, NOW)
    with pytest.raises(InvalidInputError, match="count"):
        await store.allocate_revisions(count, NOW)  # type: ignore[arg-type]
    assert await store.revision_floor() == NOW


async def test_revisions_never_pass_2_to_the_53(store: RelayStore) -> None:
    """Near the top of the safe range, an allocation that would pass it hands out nothing."""
    await store.allocate_revisions(1, MAX_SAFE_INTEGER - 1)
    with pytest.raises(CorruptStateError, match="2\\^53-1"):
        await store.allocate_revisions(5, MAX_SAFE_INTEGER - 1)
    assert await store.revision_floor() == MAX_SAFE_INTEGER - 1


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", ""])
async def test_nul_and_lone_surrogates_are_refused(store: RelayStore, bad: str) -> None:
    """A string argument with NUL or an unpaired surrogate is an InvalidInputError."""
    with pytest.raises(InvalidInputError):
        await store.profile_identity(bad)
    with pytest.raises(InvalidInputError):
        await store.enqueue_deleted(bad, "p", NOW, session_live=False, identity=None, scope=None)
    assert await store.identities() == {}
    assert await store.pending_deleted() == []


def test_records_with_wrong_field_types_cannot_be_built() -> None:
    """A `DeletedScope` of wrong types is refused when it is made, so no backend stores it."""
    with pytest.raises(InvalidInputError, match="DeletedScope"):
        DeletedScope(1, 2, 3)  # type: ignore[arg-type]


@pytest.mark.json
@pytest.mark.parametrize("reference", ["../outside.pem", "ABSOLUTE", "talaria-relay.json"])
async def test_a_json_key_reference_never_leaves_the_store(tmp_path: Path, reference: str) -> None:
    """`load_key` reads only a key file of the store itself, whatever path the reference names."""
    outside = tmp_path / "outside.pem"
    outside.write_text("-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n")
    ref = str(outside) if reference == "ABSOLUTE" else reference
    async with open_store(f"json://{tmp_path / 'state'}") as store:
        with pytest.raises(CorruptStateError, match="missing"):
            await store.load_key(ref)


@pytest.mark.json
async def test_a_json_key_behind_a_link_is_not_read(tmp_path: Path) -> None:
    """A key file name that is a symlink to a file elsewhere is treated as missing."""
    outside = tmp_path / "elsewhere.pem"
    outside.write_text("not a key")
    state = tmp_path / "state"
    async with open_store(f"json://{state}") as store:
        name = "talaria-relay-publisher-" + "0" * 16 + ".pem"
        os.symlink(outside, state / name)
        with pytest.raises(CorruptStateError, match="missing"):
            await store.load_key(name)
