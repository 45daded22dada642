"""The JSON backend's files: the legacy layout of the Python original, modes, and failure safety.

The semantics of every method are the contract suite's business; these tests look at the bytes on
disk, so an existing state dir keeps working and a crash never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from key_support import ed25519_pem
from ledger_calls import mark_sent

from relay.errors import CorruptStateError, StoreError
from relay.store import (
    DeletedScope,
    ProfileGrant,
    RelayConfig,
    StartedEntry,
    StartedScope,
    open_store,
)
from relay.store.files import open_json

pytestmark = pytest.mark.json

NOW = 1_800_000_000_000
IDENTITY_A = "pfi_" + "a" * 32
IDENTITY_B = "pfi_" + "b" * 32


def config_for(key_ref: str) -> RelayConfig:
    return RelayConfig(
        url="https://relay.example",
        publisher_id="https://hermes.example",
        key_id="key-1",
        key_ref=key_ref,
        # Given out of order: the file lists them sorted.
        profiles={
            "beta": ProfileGrant(IDENTITY_B, "prf_beta"),
            "alpha": ProfileGrant(IDENTITY_A, "prf_alpha"),
        },
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def legacy_state(state: Path) -> str:
    """A state dir as the Python original left it; returns the key's PEM."""
    pem = ed25519_pem()
    key = state / "talaria-relay-publisher-0123456789abcdef.pem"
    write(key, pem)
    config = {
        "key_id": "key-1",
        "private_key_path": str(key),
        "profiles": {"alpha": {"identity": IDENTITY_A, "profile_id": "prf_alpha"}},
        "publisher_id": "https://hermes.example",
        "url": "https://relay.example",
        "version": 2,
    }
    write(state / "talaria-relay.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
    write(state / "talaria-relay-revision", "1799999999999\n")
    ledger = {
        "version": 1,
        "profiles": [
            {
                "profileId": "prf_alpha",
                "floor": NOW - 5000,
                "sessions": [
                    {"sessionId": "later", "startedAt": NOW - 1000, "sent": False},
                    {"sessionId": "earlier", "startedAt": NOW - 2000, "sent": True},
                ],
            }
        ],
    }
    write(state / "talaria-relay-started.json", json.dumps(ledger))
    return pem


async def test_saved_config_is_byte_for_byte_the_original_format(tmp_path: Path) -> None:
    """A saved config is the original's file: sorted keys, indent 2, profiles by name, newline."""
    store = await open_json(tmp_path / "state")
    key_ref = await store.save_key("key-1", ed25519_pem())
    await store.save_config(config_for(key_ref))

    text = (tmp_path / "state" / "talaria-relay.json").read_text()
    assert text == (
        "{\n"
        '  "key_id": "key-1",\n'
        f'  "private_key_path": "{key_ref}",\n'
        '  "profiles": {\n'
        '    "alpha": {\n'
        f'      "identity": "{IDENTITY_A}",\n'
        '      "profile_id": "prf_alpha"\n'
        "    },\n"
        '    "beta": {\n'
        f'      "identity": "{IDENTITY_B}",\n'
        '      "profile_id": "prf_beta"\n'
        "    }\n"
        "  },\n"
        '  "publisher_id": "https://hermes.example",\n'
        '  "url": "https://relay.example",\n'
        '  "version": 2\n'
        "}\n"
    )
    assert await store.load_config() == config_for(key_ref)


async def test_key_file_is_named_after_the_key_id_hash(tmp_path: Path) -> None:
    """save_key writes `talaria-relay-publisher-<sha256(key_id)[:16]>.pem` and returns its path."""
    store = await open_json(tmp_path / "state")
    pem = ed25519_pem()
    key_ref = await store.save_key("key-1", pem)

    # The first 16 hex digits of sha256("key-1"), as the original named it.
    expected = tmp_path / "state" / "talaria-relay-publisher-be2974546978e373.pem"
    assert key_ref == str(expected)
    assert expected.read_text() == pem


async def test_hand_written_legacy_state_dir_is_read_through_open_store(tmp_path: Path) -> None:
    """A state dir in the original's format is read as it was: config, key, revision and ledger."""
    state = tmp_path / "state"
    pem = legacy_state(state)

    async with open_store(f"json://{state}") as store:
        assert store.display_url == f"json://{state}"
        config = await store.load_config()
        assert config is not None
        assert config.key_ref == str(state / "talaria-relay-publisher-0123456789abcdef.pem")
        assert dict(config.profiles) == {"alpha": ProfileGrant(IDENTITY_A, "prf_alpha")}
        assert await store.load_key(config.key_ref) == pem
        assert await store.revision_floor() == 1_799_999_999_999
        assert await store.allocate_revisions(2, 5) == [1_800_000_000_000, 1_800_000_000_001]
        assert await store.started_ledger() == [
            StartedScope(
                "prf_alpha",
                NOW - 5000,
                (
                    StartedEntry("prf_alpha", "earlier", NOW - 2000, sent=True),
                    StartedEntry("prf_alpha", "later", NOW - 1000),
                ),
            )
        ]
    assert (state / "talaria-relay-revision").read_text() == "1800000000001\n"


async def test_moved_state_dir_finds_its_key_by_file_name(tmp_path: Path) -> None:
    """A config naming the key at its old path still loads the key of the same name beside it."""
    state = tmp_path / "moved"
    pem = legacy_state(state)
    config_path = state / "talaria-relay.json"
    document = json.loads(config_path.read_text())
    document["private_key_path"] = str(tmp_path / "old" / Path(document["private_key_path"]).name)
    write(config_path, json.dumps(document))

    store = await open_json(state)
    config = await store.load_config()
    assert config is not None
    assert await store.load_key(config.key_ref) == pem


async def test_state_dir_is_0700_and_every_file_0600(tmp_path: Path) -> None:
    """open creates the state dir 0700, and every file the store writes is 0600."""
    state = tmp_path / "state"
    store = await open_json(state)
    await store.save_config(config_for(await store.save_key("key-1", ed25519_pem())))
    await store.profile_identity("alpha")
    await store.allocate_revisions(1, NOW)
    await store.record_started_scopes({"prf_alpha": [("s1", NOW)]}, NOW)
    await store.enqueue_deleted("gone", "alpha", NOW, session_live=False, identity=None, scope=None)
    await store.apply_presence(
        "alpha", "tab-0001", 1, True, NOW, lease_ms=90_000, fence_ms=900_000, max_tabs=256
    )

    assert mode(state) == 0o700
    names = sorted(p.name for p in state.iterdir())
    assert len(names) == 8, names  # 7 state files and the lock file
    assert {name: mode(state / name) for name in names} == dict.fromkeys(names, 0o600)


@pytest.mark.parametrize("content", ["garbage\n", "", "-7\n", "12.5\n", "\xff\n"])
async def test_unreadable_revision_counts_as_zero(tmp_path: Path, content: str) -> None:
    """A revision file that is not a non-negative integer counts as 0 and is then overwritten."""
    write(tmp_path / "state" / "talaria-relay-revision", content)
    store = await open_json(tmp_path / "state")

    assert await store.revision_floor() == 0
    assert await store.allocate_revisions(1, 42) == [42]
    assert (tmp_path / "state" / "talaria-relay-revision").read_text() == "42\n"


@pytest.mark.parametrize(
    "content",
    ["{not json", "[]", '{"version": 2, "profiles": []}', '{"version": 1, "profiles": {}}'],
)
async def test_malformed_ledger_counts_as_empty(tmp_path: Path, content: str) -> None:
    """A ledger that is not a version 1 document reads as empty, and the next write replaces it."""
    path = tmp_path / "state" / "talaria-relay-started.json"
    write(path, content)
    store = await open_json(tmp_path / "state")

    assert await store.started_ledger() == []
    await store.track_started(["prf_alpha"], NOW)
    assert json.loads(path.read_text()) == {
        "version": 1,
        "profiles": [{"profileId": "prf_alpha", "floor": NOW, "sessions": []}],
    }


async def test_malformed_ledger_entries_are_skipped(tmp_path: Path) -> None:
    """Malformed scopes and sessions are skipped; the well-formed ones around them are kept."""
    good = {"sessionId": "ok", "startedAt": NOW, "sent": False}
    bad_sessions: list[Any] = [
        "text",
        {"sessionId": "", "startedAt": NOW, "sent": False},
        {"sessionId": "no-time", "sent": False},
        {"sessionId": "float", "startedAt": 1.5, "sent": False},
        {"sessionId": "no-sent", "startedAt": NOW},
    ]
    document = {
        "version": 1,
        "profiles": [
            {"profileId": "prf_alpha", "floor": NOW, "sessions": [*bad_sessions, good]},
            {"profileId": "prf_nofloor", "sessions": []},
            {"floor": NOW, "sessions": []},
            7,
        ],
    }
    write(tmp_path / "state" / "talaria-relay-started.json", json.dumps(document))
    store = await open_json(tmp_path / "state")

    assert await store.started_ledger() == [
        StartedScope("prf_alpha", NOW, (StartedEntry("prf_alpha", "ok", NOW),))
    ]


async def test_claims_are_optional_keys_of_a_ledger_entry(tmp_path: Path) -> None:
    """A claim adds claimedBy/claimedUntil to the entry; marking it sent removes them again."""
    path = tmp_path / "state" / "talaria-relay-started.json"
    store = await open_json(tmp_path / "state")
    await store.record_started_scopes({"prf_alpha": [("s1", NOW)]}, NOW)

    def sessions() -> Any:
        return json.loads(path.read_text())["profiles"][0]["sessions"]

    assert sessions() == [{"sessionId": "s1", "startedAt": NOW, "sent": False}]
    await store.claim_started_scopes(["prf_alpha"], "owner-a", NOW, 1000)
    assert sessions() == [
        {
            "sessionId": "s1",
            "startedAt": NOW,
            "sent": False,
            "claimedBy": "owner-a",
            "claimedUntil": NOW + 1000,
        }
    ]
    await mark_sent(store, "prf_alpha", "s1")
    assert sessions() == [{"sessionId": "s1", "startedAt": NOW, "sent": True}]


@pytest.mark.parametrize(
    "content",
    [
        '{\n  "key_id": "key-1",\n  "private_key_path": "/x.pem",\n  "prof',  # truncated
        "",
        "[]",
        '"text"',
        '{"version": 2, "url": "https://relay.example", "publisher_id": "https://hermes.example",'
        ' "key_id": "k", "private_key_path": "/x.pem", "profiles": {}}',
        '{"version": 2, "url": "ftp://relay.example", "publisher_id": "https://hermes.example",'
        ' "key_id": "k", "private_key_path": "/x.pem",'
        ' "profiles": {"alpha": {"identity": "i", "profile_id": "p"}}}',
        '{"version": 2, "url": "https://relay.example", "publisher_id": "https://hermes.example",'
        ' "key_id": "k", "private_key_path": "/x.pem", "profiles": {"alpha": "p"}}',
    ],
    ids=["truncated", "empty", "array", "string", "no-profiles", "bad-url", "bad-grant"],
)
async def test_corrupt_config_raises_and_is_left_as_it_was(tmp_path: Path, content: str) -> None:
    """An unparsable or invalid version 2 config raises CorruptStateError and is not rewritten."""
    path = tmp_path / "state" / "talaria-relay.json"
    write(path, content)
    before = path.stat()
    store = await open_json(tmp_path / "state")

    with pytest.raises(CorruptStateError):
        await store.load_config()
    assert path.read_text() == content
    assert path.stat().st_mtime_ns == before.st_mtime_ns


async def test_older_config_version_reads_as_no_registration(tmp_path: Path) -> None:
    """A version 1 config reads as None: the server must register again."""
    write(tmp_path / "state" / "talaria-relay.json", '{"version": 1, "url": "x"}\n')
    store = await open_json(tmp_path / "state")

    assert await store.load_config() is None


async def test_generation_is_the_config_mtime_and_rises_on_every_save(tmp_path: Path) -> None:
    """generation is the config's st_mtime_ns, and saves within one clock tick still raise it."""
    store = await open_json(tmp_path / "state")
    config = config_for(await store.save_key("key-1", ed25519_pem()))
    generations = []
    for _ in range(5):
        await store.save_config(config)
        loaded = await store.load_config()
        assert loaded is not None
        generations.append(loaded.generation)

    assert generations == sorted(set(generations))
    assert generations[-1] == (tmp_path / "state" / "talaria-relay.json").stat().st_mtime_ns


async def test_corrupt_deleted_outbox_raises_and_is_left_as_it_was(tmp_path: Path) -> None:
    """A corrupt deleted-session outbox raises CorruptStateError on read and write, unchanged."""
    path = tmp_path / "state" / "talaria-relay-deleted.json"
    content = '{"version": 1, "views": [{"id": "x", "sessionId": "s"}]}'
    write(path, content)
    store = await open_json(tmp_path / "state")

    with pytest.raises(CorruptStateError):
        await store.pending_deleted()
    with pytest.raises(CorruptStateError):
        await store.enqueue_deleted(
            "gone", "alpha", NOW, session_live=False, identity=None, scope=None
        )
    assert path.read_text() == content


async def test_deleted_outbox_is_the_1_20_document(tmp_path: Path) -> None:
    """The outbox file is the 1.20 `DeletedViewsSchema` document, scope in camelCase or null."""
    store = await open_json(tmp_path / "state")
    scope = DeletedScope("https://relay.example", "https://hermes.example", "prf_alpha")
    first = await store.enqueue_deleted(
        "s1", "alpha", NOW, session_live=False, identity=IDENTITY_A, scope=scope
    )
    second = await store.enqueue_deleted(
        "s2", "beta", NOW + 1, session_live=False, identity=None, scope=None
    )

    document = json.loads((tmp_path / "state" / "talaria-relay-deleted.json").read_text())
    assert document == {
        "version": 1,
        "views": [
            {
                "id": first.id,
                "sessionId": "s1",
                "profile": "alpha",
                "through": NOW,
                "identity": IDENTITY_A,
                "scope": {
                    "url": "https://relay.example",
                    "publisherId": "https://hermes.example",
                    "profileId": "prf_alpha",
                },
            },
            {
                "id": second.id,
                "sessionId": "s2",
                "profile": "beta",
                "through": NOW + 1,
                "identity": None,
                "scope": None,
            },
        ],
    }


async def test_profile_home_identity_lives_in_the_profile_id_file(tmp_path: Path) -> None:
    """With profile homes, an identity is `<home>/.talaria-relay-profile-id`, 0600, not state."""
    homes = tmp_path / "homes"
    (homes / "alpha").mkdir(parents=True)
    store = await open_json(tmp_path / "state", profile_home=lambda name: homes / name)

    identity = await store.profile_identity("alpha")
    path = homes / "alpha" / ".talaria-relay-profile-id"
    assert path.read_text() == identity + "\n"
    assert mode(path) == 0o600
    assert await store.profile_identity("alpha") == identity
    assert not (tmp_path / "state" / "talaria-relay-identities.json").exists()

    await store.forget_profile_identity("alpha")
    assert not path.exists()
    await store.forget_profile_identity("alpha")  # absent: no error


async def test_profile_home_identity_written_by_the_original_is_read(tmp_path: Path) -> None:
    """An identity file the original wrote is read stripped of whitespace and left untouched."""
    home = tmp_path / "home"
    write(home / ".talaria-relay-profile-id", f"  {IDENTITY_A}\n\n")
    store = await open_json(tmp_path / "state", profile_home=lambda _: home)

    assert await store.profile_identity("alpha") == IDENTITY_A
    assert (home / ".talaria-relay-profile-id").read_text() == f"  {IDENTITY_A}\n\n"


async def test_invalid_profile_home_identity_raises(tmp_path: Path) -> None:
    """An identity file not holding `pfi_<32 hex>` raises CorruptStateError and is left alone."""
    home = tmp_path / "home"
    write(home / ".talaria-relay-profile-id", "pfi_nothex\n")
    store = await open_json(tmp_path / "state", profile_home=lambda _: home)

    with pytest.raises(CorruptStateError, match="invalid Talaria Relay profile identity"):
        await store.profile_identity("alpha")
    assert (home / ".talaria-relay-profile-id").read_text() == "pfi_nothex\n"


async def test_missing_profile_home_raises_store_error(tmp_path: Path) -> None:
    """A profile whose home is not an existing directory gets no identity: StoreError."""
    store = await open_json(tmp_path / "state", profile_home=lambda name: tmp_path / name)

    with pytest.raises(StoreError, match="unavailable"):
        await store.profile_identity("ghost")
    assert not (tmp_path / "ghost").exists()


async def test_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing at the rename raises StoreError, keeps every old file, leaves no temp."""
    state = tmp_path / "state"
    store = await open_json(state)
    key_ref = await store.save_key("key-1", ed25519_pem())
    await store.save_config(config_for(key_ref))
    await store.allocate_revisions(1, NOW)
    await store.record_started_scopes({"prf_alpha": [("s1", NOW)]}, NOW)
    before = files_of(state)

    def refuse(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StoreError):
        await store.allocate_revisions(1, NOW + 10)
    with pytest.raises(StoreError):
        await store.record_started_scopes({"prf_alpha": [("s2", NOW + 1)]}, NOW + 1)
    with pytest.raises(StoreError):
        await store.save_config(config_for(key_ref))
    monkeypatch.undo()

    assert files_of(state) == before
    assert await store.revision_floor() == NOW
