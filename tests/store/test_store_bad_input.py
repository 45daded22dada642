"""Bad input and state: refused or tolerated as the contract says; nothing stored changes.

URL errors, unreachable and unmigrated Postgres, invalid arguments on every backend, and state
corrupted behind the store's back (JSON files edited by hand, SQL rows written directly).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backends import on
from databases import behind_the_store
from key_support import ed25519_pem
from sqlalchemy import Table, delete, insert, select, update

from relay.errors import CorruptStateError, InvalidInputError, SchemaError, StoreUnavailableError
from relay.store import (
    DeletedScope,
    ProfileGrant,
    RelayConfig,
    RelayStore,
    StartedScope,
    open_store,
    resolve,
)
from relay.store.sql import schema as tables

NOW = 1_800_000_000_000
LEASE = 90_000
FENCE = 900_000
MAX_TABS = 256
IDENTITY = "pfi_" + "a" * 32
SCOPE = DeletedScope(
    url="https://relay.example", publisher_id="https://hermes.example", profile_id="prf_a"
)
PASSWORD = "s3cret"  # noqa: S105 - a fake password that must never be shown

CONFIG_FILE = "talaria-relay.json"
REVISION_FILE = "talaria-relay-revision"
STARTED_FILE = "talaria-relay-started.json"
IDENTITY_FILE = ".talaria-relay-profile-id"

ON_SQL = on("sqlite", "postgres")

# ── helpers ───────────────────────────────────────────────────────────────────


async def save_config(store: RelayStore) -> RelayConfig:
    """Save a key and a valid config with profiles alpha and beta; return the config."""
    config = RelayConfig(
        url="https://relay.example",
        publisher_id="https://hermes.example",
        key_id="key-1",
        key_ref=await store.save_key("key-1", ed25519_pem()),
        profiles={
            "alpha": ProfileGrant(identity=IDENTITY, profile_id="prf_a"),
            "beta": ProfileGrant(identity="pfi_" + "b" * 32, profile_id="prf_b"),
        },
    )
    await store.save_config(config)
    return config


async def seed(store: RelayStore) -> str:
    """Put something in every kind of state; return the saved key's reference."""
    config = await save_config(store)
    await store.profile_identity("alpha")
    await store.allocate_revisions(2, NOW)
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1), ("s2", NOW + 2)]}, NOW + 3)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 4, 1000, limit=1)
    await store.enqueue_deleted("gone", "alpha", NOW, session_live=False, identity=None, scope=None)
    await store.apply_presence(
        "alpha", "tab-0001", 3, True, NOW, lease_ms=LEASE, fence_ms=FENCE, max_tabs=MAX_TABS
    )
    return config.key_ref


async def snapshot(store: RelayStore, key_ref: str) -> dict[str, Any]:
    """Everything readable through the store (the identity of the seeded profile only)."""
    config = await store.load_config()
    return {
        "config": config,
        "generation": None if config is None else config.generation,
        "key": await store.load_key(key_ref),
        "identity": await store.profile_identity("alpha"),
        "floor": await store.revision_floor(),
        "ledger": await store.started_ledger(),
        "deleted": await store.pending_deleted(),
        "presence": await store.presence_leases(),
    }


def presence_call(**changes: Any) -> Callable[[Any], Awaitable[object]]:
    """An apply_presence call with valid arguments except `changes`."""
    args: dict[str, Any] = {
        "profile": "alpha",
        "tab_id": "tab-0002",
        "seq": 9,
        "active": True,
        "now_ms": NOW + 10,
        **changes,
    }
    limits: dict[str, Any] = {"lease_ms": LEASE, "fence_ms": FENCE, "max_tabs": MAX_TABS}
    limits.update((name, changes[name]) for name in limits if name in changes)
    positional = [args[name] for name in ("profile", "tab_id", "seq", "active", "now_ms")]
    return lambda s: s.apply_presence(*positional, **limits)


def enqueue_call(session_id: Any = "gone-2", profile: Any = "alpha", now_ms: Any = NOW) -> Any:
    return lambda s: s.enqueue_deleted(
        session_id, profile, now_ms, session_live=False, identity=None, scope=None
    )


BAD_PEM = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"

BAD_CALLS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "identity-empty-profile": lambda s: s.profile_identity(""),
    "forget-empty-profile": lambda s: s.forget_profile_identity(""),
    "save-key-not-pem": lambda s: s.save_key("key-2", "not a pem"),
    "save-key-empty-pem": lambda s: s.save_key("key-2", ""),
    "save-key-garbage-pem": lambda s: s.save_key("key-2", BAD_PEM),
    "allocate-negative-count": lambda s: s.allocate_revisions(-1, NOW),
    "allocate-float-count": lambda s: s.allocate_revisions(1.5, NOW),
    "allocate-bool-count": lambda s: s.allocate_revisions(True, NOW),
    "allocate-negative-now": lambda s: s.allocate_revisions(1, -1),
    "allocate-bool-now": lambda s: s.allocate_revisions(1, True),
    "allocate-float-now": lambda s: s.allocate_revisions(1, NOW + 0.5),
    "allocate-text-now": lambda s: s.allocate_revisions(1, str(NOW)),
    "allocate-unsafe-now": lambda s: s.allocate_revisions(1, 2**53),
    "track-negative-now": lambda s: s.track_started(["prf_new"], -1),
    "track-bool-now": lambda s: s.track_started(["prf_new"], True),
    "track-float-now": lambda s: s.track_started(["prf_new"], float(NOW)),
    "record-empty-profile": lambda s: s.record_started_scopes({"": [("s9", NOW)]}, NOW),
    "record-negative-now": lambda s: s.record_started_scopes({"prf_a": [("s9", NOW)]}, -1),
    "record-bool-now": lambda s: s.record_started_scopes({"prf_a": [("s9", NOW)]}, True),
    "claim-empty-profile": lambda s: s.claim_started_scopes([""], "owner-b", NOW + 5000, 1000),
    "claim-empty-owner": lambda s: s.claim_started_scopes(["prf_a"], "", NOW + 5000, 1000),
    "claim-negative-now": lambda s: s.claim_started_scopes(["prf_a"], "owner-b", -1, 1000),
    "claim-bool-now": lambda s: s.claim_started_scopes(["prf_a"], "owner-b", True, 1000),
    "mark-empty-profile": lambda s: s.claim_started_scopes(
        [], "owner-b", NOW + 5000, 1000, sent=[("", "s1")]
    ),
    "mark-empty-session": lambda s: s.claim_started_scopes(
        [], "owner-b", NOW + 5000, 1000, sent=[("prf_a", "")]
    ),
    "enqueue-empty-session": enqueue_call(session_id=""),
    "enqueue-empty-profile": enqueue_call(profile=""),
    "enqueue-negative-now": enqueue_call(now_ms=-1),
    "enqueue-bool-now": enqueue_call(now_ms=True),
    "enqueue-float-now": enqueue_call(now_ms=NOW + 0.5),
    "bind-empty-profile": lambda s: s.bind_deleted("", IDENTITY, SCOPE),
    "presence-empty-profile": presence_call(profile=""),
    "presence-empty-tab": presence_call(tab_id=""),
    "presence-negative-now": presence_call(now_ms=-1),
    "presence-bool-now": presence_call(now_ms=True),
    "presence-float-now": presence_call(now_ms=NOW + 0.5),
    "presence-negative-seq": presence_call(seq=-1),
    "presence-bool-seq": presence_call(seq=True),
    "presence-float-seq": presence_call(seq=9.0),
    "presence-unsafe-seq": presence_call(seq=2**53 + 1),
    "presence-int-active": presence_call(active=1),
    "presence-none-active": presence_call(active=None),
    "presence-text-active": presence_call(active="true"),
    "presence-zero-lease": presence_call(lease_ms=0),
    "presence-negative-fence": presence_call(fence_ms=-1),
    "presence-zero-max-tabs": presence_call(max_tabs=0),
    "presence-active-empty-profile": lambda s: s.presence_active("", NOW),
    "presence-active-bool-now": lambda s: s.presence_active("alpha", True),
    "presence-active-negative-now": lambda s: s.presence_active("alpha", -1),
}


def json_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def json_url(tmp_path: Path) -> str:
    return f"json://{json_dir(tmp_path)}"


def write_bytes(path: Path, content: bytes) -> None:
    path.write_bytes(content)


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def edit_json(path: Path, edit: Callable[[dict[str, Any]], object]) -> bytes:
    """Apply `edit` to the JSON object in `path`, write it back, and return the new bytes."""
    document = json.loads(path.read_text())
    edit(document)
    content = json.dumps(document, indent=2).encode() + b"\n"
    path.write_bytes(content)
    return content


def files_containing(directory: Path, needle: str) -> Iterator[Path]:
    for path in directory.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            yield path


# ── URLs and connections ──────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "url", ["mysql://relay@db/relay", f"mysql://relay:{PASSWORD}@db/relay", "relay.db", "http://x"]
)
async def test_unknown_scheme_lists_supported_forms(url: str) -> None:
    """An unsupported URL gives InvalidInputError listing the supported forms, not its password."""
    with pytest.raises(InvalidInputError) as caught:
        await open_store(url)
    message = str(caught.value)
    for form in ("sqlite+aiosqlite:///", "sqlite:///", "postgresql+asyncpg://", "postgresql://"):
        assert form in message
    assert "postgres://" in message
    assert "json:///" in message
    assert "memory://" in message
    assert PASSWORD not in message
    assert PASSWORD not in repr(caught.value)


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///:memory:", "sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:"],
)
async def test_sqlite_needs_a_file(url: str) -> None:
    """A SQLite URL without a file path (or in memory) is an InvalidInputError."""
    with pytest.raises(InvalidInputError):
        await open_store(url)


async def test_json_needs_a_directory() -> None:
    """A json:// URL without a directory is an InvalidInputError."""
    with pytest.raises(InvalidInputError):
        await open_store("json://")


async def _open_and_use(url: str) -> None:
    store = await open_store(url)
    try:
        await store.load_config()
    finally:
        await store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+asyncpg", "postgres"])
async def test_unreachable_postgres_is_unavailable_quickly(scheme: str) -> None:
    """An unreachable server gives StoreUnavailableError within 10 s, with the password redacted."""
    url = f"{scheme}://relay:{PASSWORD}@127.0.0.1:1/relay"
    with pytest.raises(StoreUnavailableError) as caught:
        await asyncio.wait_for(_open_and_use(url), timeout=10)
    assert PASSWORD not in str(caught.value)
    assert PASSWORD not in repr(caught.value)


async def _public_tables(url: str) -> list[str]:
    import asyncpg

    dsn = resolve(url).sqlalchemy_url.set(drivername="postgresql")
    conn = await asyncpg.connect(dsn.render_as_string(hide_password=False), timeout=5)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    return sorted(row["table_name"] for row in rows)


@pytest.mark.postgres
async def test_unmigrated_postgres_is_schema_error(pg_database: str) -> None:
    """Opening an unmigrated database raises SchemaError naming the command, and creates nothing."""
    assert await _public_tables(pg_database) == []
    with pytest.raises(SchemaError) as caught:
        await _open_and_use(pg_database)
    message = str(caught.value)
    assert "migrate" in message or "alembic upgrade head" in message
    assert await _public_tables(pg_database) == []


# ── invalid arguments on every backend ────────────────────────────────────────


async def test_invalid_argument_changes_nothing(store: RelayStore) -> None:
    """An argument out of its domain raises InvalidInputError and the stored state is as before:
    one seeded store takes every bad call, one after another (a call that changed it fails
    there, by name)."""
    key_ref = await seed(store)
    before = await snapshot(store, key_ref)
    wrong: list[str] = []
    for name, call in BAD_CALLS.items():
        try:
            await call(store)
        except Exception as error:  # any other class is the call's failure
            if not isinstance(error, InvalidInputError):
                wrong.append(f"{name}: {error!r}")
        else:
            wrong.append(f"{name}: no error")
        assert await snapshot(store, key_ref) == before, f"{name} changed the store"
    assert wrong == []


# ── JSON files edited behind the store's back ─────────────────────────────────


async def _json_with_config(tmp_path: Path) -> Path:
    """A JSON state dir holding a saved config; returns the config file's path."""
    async with open_store(json_url(tmp_path)) as store:
        await save_config(store)
    path = json_dir(tmp_path) / CONFIG_FILE
    assert path.is_file()
    return path


def _replace_with(content: bytes) -> Callable[[Path], bytes]:
    def corrupt(path: Path) -> bytes:
        write_bytes(path, content)
        return content

    return corrupt


def _truncate(path: Path) -> bytes:
    content = read_bytes(path)
    content = content[: len(content) // 2]
    write_bytes(path, content)
    return content


def _edit(field: str, value: object) -> Callable[[Path], bytes]:
    return lambda path: edit_json(path, lambda document: document.__setitem__(field, value))


CORRUPT_CONFIGS: dict[str, Callable[[Path], bytes]] = {
    "garbage": _replace_with(b"{not json"),
    "truncated": _truncate,
    "empty-file": _replace_with(b""),
    "not-an-object": _replace_with(b"[]\n"),
    "empty-profiles": _edit("profiles", {}),
    "profiles-not-object": _edit("profiles", ["alpha"]),
    "grant-without-identity": _edit("profiles", {"alpha": {"identity": "", "profile_id": "prf_a"}}),
    "url-not-origin": _edit("url", "ftp://relay.example"),
    "publisher-not-origin": _edit("publisher_id", "https://hermes.example/path"),
}


@pytest.mark.json
@pytest.mark.parametrize("corrupt", CORRUPT_CONFIGS.values(), ids=CORRUPT_CONFIGS.keys())
async def test_json_corrupt_config_raises_and_keeps_file(
    tmp_path: Path, corrupt: Callable[[Path], bytes]
) -> None:
    """A present but invalid config file raises CorruptStateError and its bytes stay unchanged."""
    path = await _json_with_config(tmp_path)
    content = corrupt(path)
    async with open_store(json_url(tmp_path)) as store:
        with pytest.raises(CorruptStateError):
            await store.load_config()
    assert read_bytes(path) == content


@pytest.mark.json
@pytest.mark.parametrize("version", [1, 3])
async def test_json_config_of_other_version_is_none(tmp_path: Path, version: int) -> None:
    """A config file whose version is not 2 counts as no registration, and is left as it was."""
    path = await _json_with_config(tmp_path)
    content = _edit("version", version)(path)
    async with open_store(json_url(tmp_path)) as store:
        assert await store.load_config() is None
    assert read_bytes(path) == content


@pytest.mark.json
@pytest.mark.parametrize("garbage", [b"garbage\n", b"", b"-5\n", b"\xff\xfe"])
async def test_json_garbage_revision_counts_as_zero(tmp_path: Path, garbage: bytes) -> None:
    """An unreadable revision file gives floor 0, and allocation continues from now."""
    async with open_store(json_url(tmp_path)) as store:
        await store.allocate_revisions(3, NOW + 10_000)
    path = json_dir(tmp_path) / REVISION_FILE
    assert path.is_file()
    write_bytes(path, garbage)
    async with open_store(json_url(tmp_path)) as store:
        assert await store.revision_floor() == 0
        assert await store.allocate_revisions(2, NOW) == [NOW, NOW + 1]
        assert await store.revision_floor() == NOW + 1


@pytest.mark.json
async def test_json_legacy_revision_file_is_read(tmp_path: Path) -> None:
    """A decimal revision file of the Python original is the floor allocation continues from."""
    json_dir(tmp_path).mkdir(mode=0o700)
    write_bytes(json_dir(tmp_path) / REVISION_FILE, f"{NOW + 5000}\n".encode())
    async with open_store(json_url(tmp_path)) as store:
        assert await store.revision_floor() == NOW + 5000
        assert await store.allocate_revisions(1, NOW) == [NOW + 5001]


@pytest.mark.json
@pytest.mark.parametrize("garbage", [b"{garbage", b"", b"[]", b'{"version": 1, "profiles": 7}'])
async def test_json_garbage_started_ledger_counts_as_empty(tmp_path: Path, garbage: bytes) -> None:
    """An unreadable started ledger file reads as empty and is replaced by the next write."""
    async with open_store(json_url(tmp_path)) as store:
        await store.track_started(["prf_a"], NOW)
        await store.record_started_scopes({"prf_a": [("s1", NOW + 1)]}, NOW + 1)
    path = json_dir(tmp_path) / STARTED_FILE
    assert path.is_file()
    write_bytes(path, garbage)
    async with open_store(json_url(tmp_path)) as store:
        assert await store.started_ledger() == []
        await store.track_started(["prf_b"], NOW + 5)
        assert await store.started_ledger() == [StartedScope("prf_b", NOW + 5)]


@pytest.mark.json
async def test_json_legacy_started_ledger_is_read(tmp_path: Path) -> None:
    """A ledger file of the Python original is read, its malformed entries skipped."""
    json_dir(tmp_path).mkdir(mode=0o700)
    legacy = {
        "version": 1,
        "profiles": [
            {
                "profileId": "prf_a",
                "floor": NOW,
                "sessions": [
                    {"sessionId": "s1", "startedAt": NOW + 1, "sent": True},
                    {"sessionId": 5, "startedAt": NOW + 2, "sent": False},
                    {"sessionId": "s3", "startedAt": NOW + 3, "sent": False},
                ],
            }
        ],
    }
    write_bytes(json_dir(tmp_path) / STARTED_FILE, json.dumps(legacy).encode())
    async with open_store(json_url(tmp_path)) as store:
        (scope,) = await store.started_ledger()
        assert (scope.profile_id, scope.floor) == ("prf_a", NOW)
        assert [(e.session_id, e.started_at, e.sent) for e in scope.entries] == [
            ("s1", NOW + 1, True),
            ("s3", NOW + 3, False),
        ]


@pytest.mark.json
@pytest.mark.parametrize("stored", [b"bogus\n", b"pfi_" + b"A" * 32 + b"\n", b""])
async def test_json_invalid_profile_home_identity_raises(tmp_path: Path, stored: bytes) -> None:
    """An invalid <profile home>/.talaria-relay-profile-id raises and is left as it was."""
    home = tmp_path / "homes" / "alpha"
    home.mkdir(parents=True)
    write_bytes(home / IDENTITY_FILE, stored)
    async with open_store(
        json_url(tmp_path), profile_home=lambda p: tmp_path / "homes" / p
    ) as store:
        with pytest.raises(CorruptStateError):
            await store.profile_identity("alpha")
    assert read_bytes(home / IDENTITY_FILE) == stored


@pytest.mark.json
async def test_json_legacy_profile_home_identity_is_read(tmp_path: Path) -> None:
    """A valid identity file of the Python original (with its newline) is the profile's identity."""
    home = tmp_path / "homes" / "alpha"
    home.mkdir(parents=True)
    write_bytes(home / IDENTITY_FILE, f"{IDENTITY}\n".encode())
    async with open_store(
        json_url(tmp_path), profile_home=lambda p: tmp_path / "homes" / p
    ) as store:
        assert await store.profile_identity("alpha") == IDENTITY


@pytest.mark.json
async def test_json_invalid_stored_identity_raises(tmp_path: Path) -> None:
    """An identity corrupted in the state dir raises CorruptStateError and is left as it was."""
    async with open_store(json_url(tmp_path)) as store:
        identity = await store.profile_identity("alpha")
    (path,) = files_containing(json_dir(tmp_path), identity)
    corrupted = read_bytes(path).replace(identity.encode(), b"pfi_" + b"Z" * 32)
    write_bytes(path, corrupted)
    async with open_store(json_url(tmp_path)) as store:
        with pytest.raises(CorruptStateError):
            await store.profile_identity("alpha")
    assert read_bytes(path) == corrupted


# ── SQL rows written behind the store's back ──────────────────────────────────


async def _sql(store_url: str, *statements: Any) -> list[Any]:
    """Run statements in one transaction on a plain engine; return each one's rows (or None)."""
    return await behind_the_store(store_url, *statements)


async def _rows(store_url: str, table: Table) -> list[tuple[Any, ...]]:
    (rows,) = await _sql(store_url, select(table))
    return sorted(tuple(row) for row in rows)


SQL_CORRUPT_CONFIGS = {
    "url-not-url": update(tables.config).values(url="not a url"),
    "publisher-not-origin": update(tables.config).values(publisher_id="https://hermes.example/x"),
    "empty-key-id": update(tables.config).values(key_id=""),
    "no-profiles": delete(tables.profiles),
    "grant-empty-identity": update(tables.profiles)
    .where(tables.profiles.c.profile == "beta")
    .values(identity=""),
}


@ON_SQL
@pytest.mark.parametrize("statement", SQL_CORRUPT_CONFIGS.values(), ids=SQL_CORRUPT_CONFIGS.keys())
async def test_sql_corrupt_config_row_raises_and_stays(
    store: RelayStore, store_url: str, statement: Any
) -> None:
    """A config row made invalid directly raises CorruptStateError and the rows stay as written."""
    await save_config(store)
    await _sql(store_url, statement)
    before = (await _rows(store_url, tables.config), await _rows(store_url, tables.profiles))
    with pytest.raises(CorruptStateError):
        await store.load_config()
    assert (
        await _rows(store_url, tables.config),
        await _rows(store_url, tables.profiles),
    ) == before


@ON_SQL
async def test_sql_config_row_of_other_version_is_none(store: RelayStore, store_url: str) -> None:
    """A config row whose version is not 2 counts as no registration."""
    await save_config(store)
    await _sql(store_url, update(tables.config).values(version=1))
    assert await store.load_config() is None


@ON_SQL
@pytest.mark.parametrize("stored", ["bogus", "pfi_" + "A" * 32, "", "pfi_" + "a" * 31])
async def test_sql_invalid_identity_row_raises(
    store: RelayStore, store_url: str, stored: str
) -> None:
    """An identity row not matching ^pfi_[0-9a-f]{32}$ raises CorruptStateError and stays."""
    await _sql(store_url, insert(tables.identities).values(profile="alpha", identity=stored))
    with pytest.raises(CorruptStateError):
        await store.profile_identity("alpha")
    assert await _rows(store_url, tables.identities) == [("alpha", stored)]


@ON_SQL
async def test_sql_negative_revision_floor_counts_as_zero(
    store: RelayStore, store_url: str
) -> None:
    """A negative stored floor reads as 0 and allocation continues from now."""
    await store.allocate_revisions(3, NOW + 10_000)
    await _sql(store_url, delete(tables.revision), insert(tables.revision).values(id=1, floor=-5))
    assert await store.revision_floor() == 0
    assert await store.allocate_revisions(2, NOW) == [NOW, NOW + 1]
    assert await store.revision_floor() == NOW + 1


@ON_SQL
async def test_sql_missing_key_row_raises(store: RelayStore, store_url: str) -> None:
    """A config whose key row was deleted directly makes load_key raise CorruptStateError."""
    config = await save_config(store)
    await _sql(store_url, delete(tables.keys))
    with pytest.raises(CorruptStateError):
        await store.load_key(config.key_ref)
