"""Bad input, one table per entry point: the exact error, and the whole store as it was.

Each store case is `(name, call, error class, message fragment)`; the call runs on a store seeded
with state in every aggregate, and a dump through the public read API must not change. The
messages are those of `relay.store.store`, `records` and `checks`, the one validation gate.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from harness import PUBLISHER_ID, RELAY_URL, Env, relay_env

from relay.errors import CorruptStateError, InvalidInputError, RelayError, RelayPairingError
from relay.store import DeletedScope, ProfileGrant, RelayConfig, RelayStore, open_store, records

NOW = 1_800_000_000_000
LEASE = 90_000
FENCE = 900_000
MAX_TABS = 256
IDENTITY = "pfi_" + "a" * 32
NUL = "a\x00b"
SURROGATE = "a\ud800b"
HUGE = 2**53  # one past the largest safe integer
HUGER = 2**63  # past a signed 64-bit column
KEY_ID = "key-1"
SCOPE = DeletedScope("https://relay.example", "https://hermes.example", "prf_a")

Call = Callable[[Any], Awaitable[object]]


class Case(NamedTuple):
    name: str
    call: Call
    error: type[RelayError]
    fragment: str


def pem(key: Any = None) -> str:
    key = key or Ed25519PrivateKey.generate()
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()  # type: ignore[no-any-return]


async def seed(store: RelayStore) -> None:
    """State in every aggregate: registration, key, identity, floor, ledger, outbox, presence."""
    key_ref = await store.save_key(KEY_ID, pem())
    grants = {"alpha": ProfileGrant(IDENTITY, "prf_a"), "beta": ProfileGrant(IDENTITY, "prf_b")}
    await store.save_config(
        RelayConfig("https://relay.example", "https://hermes.example", KEY_ID, key_ref, grants)
    )
    await store.profile_identity("alpha")
    await store.allocate_revisions(2, NOW)
    await store.track_started(["prf_a"], NOW)
    await store.record_started_scopes({"prf_a": [("s1", NOW + 1), ("s2", NOW + 2)]}, NOW + 3)
    await store.claim_started_scopes(["prf_a"], "owner-a", NOW + 4, 1000, limit=1)
    await store.enqueue_deleted("gone", "alpha", NOW, session_live=False, identity=None, scope=None)
    await store.enqueue_deleted(
        "gone-b", "beta", NOW, session_live=False, identity=IDENTITY, scope=SCOPE
    )
    await store.apply_presence(
        "alpha", "tab-0001", 3, True, NOW, lease_ms=LEASE, fence_ms=FENCE, max_tabs=MAX_TABS
    )


async def dump(store: RelayStore) -> dict[str, Any]:
    """The whole store through its public read API, minting nothing; the same on every backend."""
    config = await store.load_config()
    return {
        "config": config,
        "generation": None if config is None else config.generation,
        "key": None if config is None else await store.load_key(config.key_ref),
        "identities": await store.identities(),
        "floor": await store.revision_floor(),
        "ledger": await store.started_ledger(),
        "deleted": await store.pending_deleted(),
        "presence": await store.presence_leases(),
    }


async def build(record: Callable[..., object], *args: Any, **fields: Any) -> object:
    """Build a record; a table call, so that building one can be refused like a store call."""
    return record(*args, **fields)


def presence(**changes: Any) -> Call:
    """An apply_presence call, valid but for `changes`."""
    args: dict[str, Any] = {"profile": "alpha", "tab_id": "tab-0002", "seq": 9, "active": True}
    args.update({"now_ms": NOW + 10, "lease_ms": LEASE, "fence_ms": FENCE, "max_tabs": MAX_TABS})
    args.update(changes)
    positional = [args.pop(name) for name in ("profile", "tab_id", "seq", "active", "now_ms")]
    return lambda s: s.apply_presence(*positional, **args)


def enqueue(**changes: Any) -> Call:
    """An enqueue_deleted call, valid but for `changes`."""
    args: dict[str, Any] = {"session_id": "gone-2", "profile": "alpha", "now_ms": NOW}
    args.update({"session_live": False, "identity": None, "scope": None})
    args.update(changes)
    positional = [args.pop(name) for name in ("session_id", "profile", "now_ms")]
    return lambda s: s.enqueue_deleted(*positional, **args)


def claim(**changes: Any) -> Call:
    """A claim_started_scopes call of one scope, valid but for `changes`."""
    args: dict[str, Any] = {"profile_id": "prf_a", "owner": "owner-b", "now_ms": NOW + 5000}
    args.update({"lease_ms": 1000, "limit": None})
    args.update(changes)
    args["profile_ids"] = [args.pop("profile_id")]
    return lambda s: s.claim_started_scopes(**args)


def mark(*pairs: Any) -> Call:
    """The marks alone: a claim_started_scopes call of no scope, `sent` these pairs."""
    return lambda s: s.claim_started_scopes([], "owner-b", NOW + 5000, 1000, sent=list(pairs))


def text_cases(prefix: str, kind: str, call: Callable[[Any], Call]) -> list[Case]:
    """The string argument `kind` given None, a number, empty, NUL and a lone surrogate."""
    shape = f"{kind} must be a non-empty string"
    content = f"{kind} must not contain NUL or unpaired surrogates"
    return [
        Case(f"{prefix}-none", call(None), InvalidInputError, shape),
        Case(f"{prefix}-int", call(7), InvalidInputError, shape),
        Case(f"{prefix}-bytes", call(b"alpha"), InvalidInputError, shape),
        Case(f"{prefix}-empty", call(""), InvalidInputError, shape),
        Case(f"{prefix}-nul", call(NUL), InvalidInputError, content),
        Case(f"{prefix}-surrogate", call(SURROGATE), InvalidInputError, content),
    ]


def int_cases(
    prefix: str,
    kind: str,
    call: Callable[[Any], Call],
    minimum: int = 0,
    optional: bool = False,
    int64: bool = False,
) -> list[Case]:
    """The integer argument `kind` given past 2^53-1 and 2^63, negative, a bool, NaN, inf, text.

    An `int64` argument (an opaque counter that never goes on the wire) may pass 2^53-1.
    """
    message = f"{kind} must be an integer in {minimum}..2^{63 if int64 else 53}-1"
    values: list[tuple[str, object]] = [
        *([] if int64 else [("unsafe", HUGE)]),
        ("int64", HUGER),
        ("negative", minimum - 1),
        ("bool", True),
        ("nan", math.nan),
        ("inf", math.inf),
        ("float", 1.5),
        ("text", "5"),
    ]
    if not optional:  # None means "no value" where the argument is optional
        values.append(("none", None))
    return [
        Case(f"{prefix}-{label}", call(value), InvalidInputError, message)
        for label, value in values
    ]


EC_PEM = pem(generate_private_key(SECP256R1()))
BAD_PEM = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
UNREADABLE_PEM = "publisher key must be a PKCS#8 PEM private key"

STORE_CASES: list[Case] = [
    # ── registration ──
    Case(
        "save-config-none",
        lambda s: s.save_config(None),
        InvalidInputError,
        "config must be a RelayConfig",
    ),
    Case(
        "save-config-dict",
        lambda s: s.save_config({"url": RELAY_URL}),
        InvalidInputError,
        "config must be a RelayConfig",
    ),
    *int_cases(
        "save-config-generation",
        "expected_generation",
        lambda v: lambda s: save_config_again(s, v),
        optional=True,
        int64=True,
    ),
    *text_cases("save-key-id", "key_id", lambda v: lambda s: s.save_key(v, pem())),
    Case(
        "save-key-pem-none", lambda s: s.save_key("key-2", None), InvalidInputError, UNREADABLE_PEM
    ),
    Case(
        "save-key-pem-bytes",
        lambda s: s.save_key("key-2", pem().encode()),
        InvalidInputError,
        UNREADABLE_PEM,
    ),
    Case(
        "save-key-pem-garbage",
        lambda s: s.save_key("key-2", BAD_PEM),
        InvalidInputError,
        UNREADABLE_PEM,
    ),
    Case(
        "save-key-pem-nul",
        lambda s: s.save_key("key-2", pem() + "\x00"),
        InvalidInputError,
        UNREADABLE_PEM,
    ),
    Case(
        "save-key-pem-surrogate",
        lambda s: s.save_key("key-2", pem() + "\ud800"),
        InvalidInputError,
        UNREADABLE_PEM,
    ),
    Case(
        "save-key-pem-huge",
        lambda s: s.save_key("key-2", "A" * 10**6),
        InvalidInputError,
        UNREADABLE_PEM,
    ),
    Case(
        "save-key-pem-ec",
        lambda s: s.save_key("key-2", EC_PEM),
        InvalidInputError,
        "must be an Ed25519 private key",
    ),
    *text_cases("load-key", "key reference", lambda v: lambda s: s.load_key(v)),
    Case(
        "load-key-outside-store",
        lambda s: s.load_key("../../../../etc/hostname"),
        CorruptStateError,
        "is missing",
    ),
    Case(
        "load-key-absolute", lambda s: s.load_key("/etc/hostname"), CorruptStateError, "is missing"
    ),
    *text_cases("stored-key", "key reference", lambda v: lambda s: s.stored_key(v)),
    Case(
        "rekey-text-passphrase",
        lambda s: s.rekey("hunter2"),
        InvalidInputError,
        "passphrase must be a Passphrase or None",
    ),
    Case(
        "rekey-bytes-passphrase",
        lambda s: s.rekey(b"hunter2"),
        InvalidInputError,
        "passphrase must be a Passphrase or None",
    ),
    *text_cases("identity", "profile", lambda v: lambda s: s.profile_identity(v)),
    *text_cases("forget", "profile", lambda v: lambda s: s.forget_profile_identity(v)),
    # ── revisions ──
    *int_cases("allocate-count", "count", lambda v: lambda s: s.allocate_revisions(v, NOW)),
    Case(
        "allocate-count-2^53-1",
        lambda s: s.allocate_revisions(2**53 - 1, NOW),
        InvalidInputError,
        "count may be at most 100000",
    ),
    Case(
        "allocate-count-batch",
        lambda s: s.allocate_revisions(100_001, NOW),
        InvalidInputError,
        "count may be at most 100000",
    ),
    *int_cases("allocate-now", "now_ms", lambda v: lambda s: s.allocate_revisions(1, v)),
    Case(
        "allocate-past-2^53",
        lambda s: s.allocate_revisions(10, 2**53 - 5),
        CorruptStateError,
        "would pass 2^53-1",
    ),
    # ── started ledger ──
    Case(
        "track-string",
        lambda s: s.track_started("abc", NOW),
        InvalidInputError,
        "profile_ids must be an iterable of values, not str",
    ),
    Case(
        "track-bytes",
        lambda s: s.track_started(b"abc", NOW),
        InvalidInputError,
        "profile_ids must be an iterable of values, not bytes",
    ),
    Case(
        "track-none",
        lambda s: s.track_started(None, NOW),
        InvalidInputError,
        "profile_ids must be an iterable of values, not NoneType",
    ),
    Case(
        "track-dict",
        lambda s: s.track_started({"prf_n": 1}, NOW),
        InvalidInputError,
        "profile_ids must be an iterable of values, not dict",
    ),
    Case(
        "track-int",
        lambda s: s.track_started(5, NOW),
        InvalidInputError,
        "profile_ids must be an iterable of values, not int",
    ),
    *text_cases(
        "track-member", "profile_id", lambda v: lambda s: s.track_started(["prf_new", v], NOW)
    ),
    *int_cases("track-now", "now_ms", lambda v: lambda s: s.track_started(["prf_new"], v)),
    *text_cases(
        "record-profile",
        "profile_id",
        lambda v: lambda s: s.record_started_scopes({v: [("s9", NOW)]}, NOW),
    ),
    Case(
        "record-seen-string",
        lambda s: s.record_started_scopes({"prf_a": "s9"}, NOW),
        InvalidInputError,
        "seen must be an iterable of values, not str",
    ),
    Case(
        "record-seen-none",
        lambda s: s.record_started_scopes({"prf_a": None}, NOW),
        InvalidInputError,
        "seen must be an iterable of values, not NoneType",
    ),
    Case(
        "record-seen-dict",
        lambda s: s.record_started_scopes({"prf_a": {"s9": NOW}}, NOW),
        InvalidInputError,
        "seen must be an iterable of values, not dict",
    ),
    Case(
        "record-seen-flat",
        lambda s: s.record_started_scopes({"prf_a": ["s9", NOW]}, NOW),
        InvalidInputError,
        "seen must hold (session_id, started_at) pairs",
    ),
    Case(
        "record-seen-triple",
        lambda s: s.record_started_scopes({"prf_a": [("s9", NOW, 1)]}, NOW),
        InvalidInputError,
        "seen must hold (session_id, started_at) pairs",
    ),
    Case(
        "record-seen-none-pair",
        lambda s: s.record_started_scopes({"prf_a": [None]}, NOW),
        InvalidInputError,
        "seen must hold (session_id, started_at) pairs",
    ),
    *int_cases(
        "record-now",
        "now_ms",
        lambda v: lambda s: s.record_started_scopes({"prf_a": [("s9", NOW)]}, v),
    ),
    *text_cases("claim-profile", "profile_id", lambda v: claim(profile_id=v)),
    *text_cases("claim-owner", "owner", lambda v: claim(owner=v)),
    *int_cases("claim-now", "now_ms", lambda v: claim(now_ms=v)),
    *int_cases("claim-lease", "lease_ms", lambda v: claim(lease_ms=v), minimum=1),
    Case(
        "claim-lease-zero", claim(lease_ms=0), InvalidInputError, "lease_ms must be an integer in 1"
    ),
    Case(
        "claim-owner-long",
        claim(owner="o" * 65),
        InvalidInputError,
        "owner must be a non-empty string of at most 64",
    ),
    Case(
        "claim-lease-past-2^53",
        claim(now_ms=2**53 - 10, lease_ms=11),
        InvalidInputError,
        "lease ends past 2^53-1 ms",
    ),
    Case(
        "claim-limit-zero",
        claim(limit=0),
        InvalidInputError,
        "limit must be an integer in 1..100000",
    ),
    Case("claim-limit-huge", claim(limit=HUGE), InvalidInputError, "limit must be an integer in"),
    Case(
        "claim-limit-batch",
        claim(limit=100_001),
        InvalidInputError,
        "limit must be an integer in 1..100000",
    ),
    Case("claim-limit-bool", claim(limit=True), InvalidInputError, "limit must be an integer in"),
    Case(
        "claim-limit-nan", claim(limit=math.nan), InvalidInputError, "limit must be an integer in"
    ),
    *text_cases("mark-profile", "profile_id", lambda v: mark((v, "s1"))),
    *text_cases("mark-session", "session_id", lambda v: mark(("prf_a", "s1"), ("prf_a", v))),
    Case(
        "mark-session-list",
        mark(("prf_a", ["s1", "s2"])),
        InvalidInputError,
        "session_id must be a non-empty string",
    ),
    # ── deleted outbox ──
    *text_cases("enqueue-session", "session_id", lambda v: enqueue(session_id=v)),
    *text_cases("enqueue-profile", "profile", lambda v: enqueue(profile=v)),
    *int_cases("enqueue-now", "now_ms", lambda v: enqueue(now_ms=v)),
    Case(
        "enqueue-live-int",
        enqueue(session_live=1),
        InvalidInputError,
        "session_live must be a boolean",
    ),
    Case(
        "enqueue-live-none",
        enqueue(session_live=None),
        InvalidInputError,
        "session_live must be a boolean",
    ),
    Case(
        "enqueue-identity-nul",
        enqueue(identity=NUL),
        InvalidInputError,
        "identity must not contain NUL",
    ),
    Case(
        "enqueue-identity-int",
        enqueue(identity=5),
        InvalidInputError,
        "identity must be a non-empty string",
    ),
    Case(
        "enqueue-scope-tuple",
        enqueue(scope=("https://relay.example", "https://hermes.example", "prf_a")),
        InvalidInputError,
        "scope must be a DeletedScope",
    ),
    Case(
        "enqueue-scope-dict",
        enqueue(scope={"url": RELAY_URL}),
        InvalidInputError,
        "scope must be a DeletedScope",
    ),
    *text_cases("bind-profile", "profile", lambda v: lambda s: s.bind_deleted(v, IDENTITY, SCOPE)),
    *text_cases("bind-identity", "identity", lambda v: lambda s: s.bind_deleted("alpha", v, SCOPE)),
    Case(
        "bind-scope-none",
        lambda s: s.bind_deleted("alpha", IDENTITY, None),
        InvalidInputError,
        "scope must be a DeletedScope",
    ),
    Case(
        "bind-scope-tuple",
        lambda s: s.bind_deleted(
            "alpha", IDENTITY, ("https://relay.example", "https://hermes.example", "prf_a")
        ),
        InvalidInputError,
        "scope must be a DeletedScope",
    ),
    *text_cases("ack-id", "view id", lambda v: lambda s: s.ack_deleted(v, NOW)),
    *int_cases("ack-through", "through", lambda v: lambda s: s.ack_deleted("some-id", v)),
    # ── presence ──
    *text_cases("presence-profile", "profile", lambda v: presence(profile=v)),
    *text_cases("presence-tab", "tab_id", lambda v: presence(tab_id=v)),
    Case(
        "presence-tab-long",
        presence(tab_id="t" * 65),
        InvalidInputError,
        "tab_id must be a non-empty string of at most 64",
    ),
    *int_cases("presence-seq", "seq", lambda v: presence(seq=v)),
    Case("presence-active-int", presence(active=1), InvalidInputError, "active must be a boolean"),
    Case(
        "presence-active-none", presence(active=None), InvalidInputError, "active must be a boolean"
    ),
    Case(
        "presence-active-text",
        presence(active="true"),
        InvalidInputError,
        "active must be a boolean",
    ),
    *int_cases("presence-now", "now_ms", lambda v: presence(now_ms=v)),
    *int_cases("presence-lease", "lease_ms", lambda v: presence(lease_ms=v), minimum=1),
    Case(
        "presence-lease-zero",
        presence(lease_ms=0),
        InvalidInputError,
        "lease_ms must be an integer in 1..2^53-1",
    ),
    Case(
        "presence-lease-past-2^53",
        presence(now_ms=2**53 - 10, lease_ms=11),
        InvalidInputError,
        "presence lease ends past 2^53-1 ms",
    ),
    *int_cases("presence-fence", "fence_ms", lambda v: presence(fence_ms=v)),
    Case(
        "presence-fence-past-2^53",
        presence(fence_ms=2**53 - 1),
        InvalidInputError,
        "presence fence ends past 2^53-1 ms",
    ),
    *int_cases("presence-max-tabs", "max_tabs", lambda v: presence(max_tabs=v), minimum=1),
    Case(
        "presence-max-tabs-batch",
        presence(max_tabs=100_001),
        InvalidInputError,
        "max_tabs must be an integer in 1..100000",
    ),
    *text_cases(
        "presence-active-profile", "profile", lambda v: lambda s: s.presence_active(v, NOW)
    ),
    *int_cases("presence-active-now", "now_ms", lambda v: lambda s: s.presence_active("alpha", v)),
    # ── transfer ──
    Case(
        "merge-none", lambda s: s.merge_state(None), InvalidInputError, "batch must be a StateBatch"
    ),
    Case(
        "merge-dict",
        lambda s: s.merge_state({"revision_floor": HUGE}),
        InvalidInputError,
        "batch must be a StateBatch",
    ),
    # ── records: building one with fields of the wrong type is refused ──
    Case(
        "scope-ints",
        lambda s: build(records.DeletedScope, 1, 2, 3),
        InvalidInputError,
        "DeletedScope: url must be an HTTP(S) origin",
    ),
    Case(
        "scope-profile-nul",
        lambda s: build(records.DeletedScope, RELAY_URL, PUBLISHER_ID, NUL),
        InvalidInputError,
        "DeletedScope: profile_id must not contain NUL",
    ),
    Case(
        "scope-url-path",
        lambda s: build(records.DeletedScope, RELAY_URL + "/x", PUBLISHER_ID, "p"),
        InvalidInputError,
        "DeletedScope: url must be an HTTP(S) origin",
    ),
    Case(
        "config-profiles-none",
        lambda s: build(records.RelayConfig, RELAY_URL, PUBLISHER_ID, "k", "r", None),
        InvalidInputError,
        "RelayConfig: profiles must be a mapping, not NoneType",
    ),
    Case(
        "config-profiles-empty",
        lambda s: build(records.RelayConfig, RELAY_URL, PUBLISHER_ID, "k", "r", {}),
        InvalidInputError,
        "RelayConfig: profiles must name at least one profile",
    ),
    Case(
        "config-grant-none",
        lambda s: build(records.RelayConfig, RELAY_URL, PUBLISHER_ID, "k", "r", {"a": None}),
        InvalidInputError,
        "RelayConfig: grant of profile 'a' must be a ProfileGrant",
    ),
    Case(
        "config-name-int",
        lambda s: build(
            records.RelayConfig,
            RELAY_URL,
            PUBLISHER_ID,
            "k",
            "r",
            {1: records.ProfileGrant(IDENTITY, "p")},
        ),
        InvalidInputError,
        "RelayConfig: profile name must be a non-empty string",
    ),
    Case(
        "config-generation-huge",
        lambda s: build(
            records.RelayConfig,
            RELAY_URL,
            PUBLISHER_ID,
            "k",
            "r",
            {"a": records.ProfileGrant(IDENTITY, "p")},
            HUGER,
        ),
        InvalidInputError,
        "RelayConfig: generation must be an integer in 0..2^63-1",
    ),
    Case(
        "config-key-ref-surrogate",
        lambda s: build(
            records.RelayConfig,
            RELAY_URL,
            PUBLISHER_ID,
            "k",
            SURROGATE,
            {"a": records.ProfileGrant(IDENTITY, "p")},
        ),
        InvalidInputError,
        "RelayConfig: key_ref must not contain NUL",
    ),
    Case(
        "grant-none",
        lambda s: build(records.ProfileGrant, None, "p"),
        InvalidInputError,
        "ProfileGrant: identity must be a non-empty string",
    ),
    Case(
        "entry-started-nan",
        lambda s: build(records.StartedEntry, "p", "s", math.nan),
        InvalidInputError,
        "started_at must be an integer in 0..2^53-1",
    ),
    Case(
        "entry-sent-int",
        lambda s: build(records.StartedEntry, "p", "s", NOW, 1),
        InvalidInputError,
        "sent must be a boolean",
    ),
    Case(
        "scope-entries-string",
        lambda s: build(records.StartedScope, "p", 0, "abc"),
        InvalidInputError,
        "entries must be an iterable of values, not str",
    ),
    Case(
        "scope-entry-other",
        lambda s: build(records.StartedScope, "p", 0, (records.StartedEntry("q", "s", NOW),)),
        InvalidInputError,
        "entry 's' is of another scope",
    ),
    Case(
        "view-through-int64",
        lambda s: build(records.DeletedView, "id", "s", "p", HUGER),
        InvalidInputError,
        "through must be an integer in 0..2^53-1",
    ),
    Case(
        "view-scope-tuple",
        lambda s: build(records.DeletedView, "id", "s", "p", NOW, None, (1, 2, 3)),
        InvalidInputError,
        "scope must be a DeletedScope",
    ),
    Case(
        "lease-seq-bool",
        lambda s: build(records.PresenceLease, "p", "tab-0001", True, True, NOW, NOW),
        InvalidInputError,
        "seq must be an integer in 0..2^53-1",
    ),
    Case(
        "batch-identities-none",
        lambda s: build(records.StateBatch, identities=None),
        InvalidInputError,
        "StateBatch: identities must be a mapping, not NoneType",
    ),
    Case(
        "batch-identity-invalid",
        lambda s: build(records.StateBatch, identities={"a": "x"}),
        InvalidInputError,
        "StateBatch: identity of profile 'a' must be a pfi_<32 hex> identity",
    ),
    Case(
        "batch-floor-unsafe",
        lambda s: build(records.StateBatch, revision_floor=HUGE),
        InvalidInputError,
        "StateBatch: revision_floor must be an integer in 0..2^53-1",
    ),
    Case(
        "batch-floor-nan",
        lambda s: build(records.StateBatch, revision_floor=math.nan),
        InvalidInputError,
        "StateBatch: revision_floor must be an integer in 0..2^53-1",
    ),
    Case(
        "batch-started-string",
        lambda s: build(records.StateBatch, started="abc"),
        InvalidInputError,
        "StateBatch: started must be an iterable of values, not str",
    ),
    Case(
        "batch-started-none",
        lambda s: build(records.StateBatch, started=[None]),
        InvalidInputError,
        "StateBatch: started scope must be a StartedScope",
    ),
    Case(
        "batch-deleted-dict",
        lambda s: build(records.StateBatch, deleted=[{"id": "x"}]),
        InvalidInputError,
        "StateBatch: deleted view must be a DeletedView",
    ),
    Case(
        "batch-presence-none",
        lambda s: build(records.StateBatch, presence=None),
        InvalidInputError,
        "StateBatch: presence must be an iterable of values, not NoneType",
    ),
]


async def save_config_again(store: Any, generation: object) -> None:
    """Save the stored registration again, expecting `generation`."""
    await store.save_config(await store.load_config(), expected_generation=generation)


def test_the_table_is_large_and_its_names_unique() -> None:
    """The store table holds at least 80 cases per backend, each under its own name."""
    names = [case.name for case in STORE_CASES]
    assert len(names) >= 80
    assert len(set(names)) == len(names)


async def test_bad_store_input_is_refused_and_changes_nothing(store: RelayStore) -> None:
    """Each bad call raises exactly its error class with its message, and the whole store stays
    as it was: one seeded store takes the whole table, as a store in use takes bad calls one
    after another (a call that changed it fails there, by name)."""
    await seed(store)
    before = await dump(store)
    wrong: list[str] = []
    for case in STORE_CASES:
        try:
            await case.call(store)
        except Exception as error:  # any other class is the case's failure
            if type(error) is not case.error or case.fragment not in str(error):
                wrong.append(
                    f"{case.name}: {error!r}, not {case.error.__name__}({case.fragment!r})"
                )
        else:
            wrong.append(f"{case.name}: no error")
        assert await dump(store) == before, f"{case.name} changed the store"
    assert wrong == []


# ── RelayService ──────────────────────────────────────────────────────────────


def pair_body(**changes: Any) -> dict[str, Any]:
    """A pairing body that is valid but for `changes` (its invitation is never redeemed)."""
    body = {"relay_url": RELAY_URL, "publisher_id": PUBLISHER_ID, "publisher_invitation": "inv"}
    return {**body, **changes}


@asynccontextmanager
async def service_env(tmp_path: Path) -> AsyncIterator[tuple[RelayStore, Env]]:
    """A service with profiles default and beta on a fresh SQLite store."""
    async with (
        open_store(f"sqlite:///{tmp_path / 'relay.db'}") as store,
        relay_env(store, profiles=("default", "beta")) as env,
    ):
        yield store, env


ServiceCall = Callable[[Env], Awaitable[object]]
PRESENCE_BODY = {"tab_id": "tab-00000001", "active": True, "seq": 4}
INVALID_PAIRING = "Invalid relay pairing fields"
MISSING_PAIRING = "Missing relay pairing fields"
UNAVAILABLE = "Hermes profile is unavailable"


class ServiceCase(NamedTuple):
    name: str
    call: ServiceCall
    error: type[RelayError]
    fragment: str
    status: int | None = None


SERVICE_CASES: list[ServiceCase] = [
    ServiceCase(
        "pair-body-none",
        lambda e: e.service.pair(None, "beta", operator=True),
        RelayPairingError,
        "Invalid pairing request",
        400,
    ),
    ServiceCase(
        "pair-body-list",
        lambda e: e.service.pair([], "beta", operator=True),
        RelayPairingError,
        "Invalid pairing request",
        400,
    ),
    ServiceCase(
        "pair-body-text",
        lambda e: e.service.pair("{}", "beta", operator=True),
        RelayPairingError,
        "Invalid pairing request",
        400,
    ),
    ServiceCase(
        "pair-url-none",
        lambda e: e.service.pair(pair_body(relay_url=None), "beta", operator=True),
        RelayPairingError,
        MISSING_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-invitation-int",
        lambda e: e.service.pair(pair_body(publisher_invitation=5), "beta", operator=True),
        RelayPairingError,
        MISSING_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-label-list",
        lambda e: e.service.pair(pair_body(label=["x"]), "beta", operator=True),
        RelayPairingError,
        MISSING_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-invitation-nul",
        lambda e: e.service.pair(pair_body(publisher_invitation=NUL), "beta", operator=True),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-invitation-surrogate",
        lambda e: e.service.pair(pair_body(publisher_invitation=SURROGATE), "beta", operator=True),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-publisher-surrogate",
        lambda e: e.service.pair(
            pair_body(publisher_id="https://h\ud800.example"), "beta", operator=True
        ),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-label-nul",
        lambda e: e.service.pair(pair_body(label=NUL), "beta", operator=True),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-url-nul",
        lambda e: e.service.pair(pair_body(relay_url=RELAY_URL + "\x00"), "beta", operator=True),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-invitation-long",
        lambda e: e.service.pair(pair_body(publisher_invitation="i" * 257), "beta", operator=True),
        RelayPairingError,
        INVALID_PAIRING,
        400,
    ),
    ServiceCase(
        "pair-profile-none",
        lambda e: e.service.pair(pair_body(), None, operator=True),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a string",
    ),
    ServiceCase(
        "pair-profile-int",
        lambda e: e.service.pair(pair_body(), 3, operator=True),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a string",
    ),
    ServiceCase(
        "pair-profile-nul",
        lambda e: e.service.pair(pair_body(), "beta\x00", operator=True),
        RelayPairingError,
        UNAVAILABLE,
        403,
    ),
    ServiceCase(
        "pair-profile-surrogate",
        lambda e: e.service.pair(pair_body(), SURROGATE, operator=True),
        RelayPairingError,
        UNAVAILABLE,
        403,
    ),
    ServiceCase(
        "pair-operator-text",
        lambda e: e.service.pair(pair_body(), "beta", operator="yes"),  # type: ignore[arg-type]
        InvalidInputError,
        "operator must be a boolean",
    ),
    ServiceCase(
        "presence-body-none",
        lambda e: e.service.update_presence(None, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-seq-nan",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "seq": math.nan}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-seq-inf",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "seq": math.inf}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-seq-int64",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "seq": HUGER}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-seq-huge-float",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "seq": 1e300}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-seq-bool",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "seq": True}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-tab-surrogate",
        lambda e: e.service.update_presence({**PRESENCE_BODY, "tab_id": "tab-\ud800-0001"}, "beta"),
        RelayPairingError,
        "Invalid presence request",
        400,
    ),
    ServiceCase(
        "presence-profile-none",
        lambda e: e.service.update_presence(PRESENCE_BODY, None),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a string",
    ),
    ServiceCase(
        "presence-profile-nul",
        lambda e: e.service.update_presence(PRESENCE_BODY, "beta\x00"),
        RelayPairingError,
        UNAVAILABLE,
        403,
    ),
    ServiceCase(
        "presence-profile-surrogate",
        lambda e: e.service.update_presence(PRESENCE_BODY, SURROGATE),
        RelayPairingError,
        UNAVAILABLE,
        403,
    ),
    ServiceCase(
        "presence-active-none",
        lambda e: e.service.presence.active(None),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a non-empty string",
    ),
    ServiceCase(
        "viewed-none",
        lambda e: e.service.mark_viewed(None),  # type: ignore[arg-type]
        InvalidInputError,
        "session_id must be a non-empty string",
    ),
    ServiceCase(
        "viewed-nul",
        lambda e: e.service.mark_viewed(NUL),
        InvalidInputError,
        "session_id must not contain NUL",
    ),
    ServiceCase(
        "viewed-surrogate",
        lambda e: e.service.mark_viewed(SURROGATE),
        InvalidInputError,
        "session_id must not contain NUL",
    ),
    ServiceCase(
        "deleted-session-none",
        lambda e: e.service.clear_deleted(None, "beta"),  # type: ignore[arg-type]
        InvalidInputError,
        "session_id must be a non-empty string",
    ),
    ServiceCase(
        "deleted-session-nul",
        lambda e: e.service.clear_deleted(NUL, "beta"),
        InvalidInputError,
        "session_id must not contain NUL",
    ),
    ServiceCase(
        "deleted-profile-int",
        lambda e: e.service.clear_deleted("s", 5),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a non-empty string",
    ),
    ServiceCase(
        "deleted-profile-surrogate",
        lambda e: e.service.clear_deleted("s", SURROGATE),
        InvalidInputError,
        "profile must not contain NUL",
    ),
    ServiceCase(
        "deleted-profile-blank",
        lambda e: e.service.clear_deleted("s", "   "),
        InvalidInputError,
        "profile '   ' has no canonical name here",
    ),
    ServiceCase(
        "profile-deleted-blank",
        lambda e: e.service.profile_deleted(" "),
        InvalidInputError,
        "profile ' ' has no canonical name here",
    ),
    ServiceCase(
        "profile-deleted-none",
        lambda e: e.service.profile_deleted(None),  # type: ignore[arg-type]
        InvalidInputError,
        "profile must be a non-empty string",
    ),
    ServiceCase(
        "profile-deleted-nul",
        lambda e: e.service.profile_deleted("default\x00"),
        InvalidInputError,
        "profile must not contain NUL",
    ),
    ServiceCase(
        "terminal-stream-none",
        lambda e: e.service.note_terminal(None, "completed"),  # type: ignore[arg-type]
        InvalidInputError,
        "stream_id must be a non-empty string",
    ),
    ServiceCase(
        "terminal-phase-none",
        lambda e: e.service.note_terminal("stream-1", None),  # type: ignore[arg-type]
        InvalidInputError,
        "phase must be a non-empty string",
    ),
    ServiceCase(
        "terminal-phase-list",
        lambda e: e.service.note_terminal("stream-1", ["completed"]),  # type: ignore[arg-type]
        InvalidInputError,
        "phase must be a non-empty string",
    ),
]


@pytest.mark.sqlite
@pytest.mark.parametrize("case", SERVICE_CASES, ids=[case.name for case in SERVICE_CASES])
async def test_bad_service_input_is_refused_and_changes_nothing(
    tmp_path: Path, case: ServiceCase
) -> None:
    """Each bad service call raises exactly its error (and status); the whole store stays."""
    async with service_env(tmp_path) as (store, env):
        await env.pair()
        before = await dump(store)
        with pytest.raises(RelayError) as caught:
            await case.call(env)
        assert type(caught.value) is case.error, repr(caught.value)
        assert case.fragment in str(caught.value)
        if case.status is not None:
            assert isinstance(caught.value, RelayPairingError)
            assert caught.value.status == case.status
        assert await dump(store) == before


REFUSED_ENROLLMENTS: dict[str, Callable[[Env], dict[str, Any]]] = {
    "invitation-refused-by-relay": lambda e: pair_body(publisher_invitation="not-an-invitation"),
    "other-publisher": lambda e: pair_body(
        publisher_id="https://other.example", publisher_invitation=e.relay.mint_invitation()
    ),
    "untrusted-relay": lambda e: pair_body(
        relay_url="https://evil.example", publisher_invitation=e.relay.mint_invitation()
    ),
}


@pytest.mark.sqlite
@pytest.mark.parametrize("body", REFUSED_ENROLLMENTS.values(), ids=REFUSED_ENROLLMENTS.keys())
async def test_refused_enrollment_mints_no_identity(
    tmp_path: Path, body: Callable[[Env], dict[str, Any]]
) -> None:
    """An enrollment the relay or the service refuses leaves the new profile without identity."""
    async with service_env(tmp_path) as (store, env):
        await env.pair()
        before = await dump(store)
        with pytest.raises(RelayPairingError):
            await env.service.pair(body(env), "beta", operator=True)
        assert "beta" not in await store.identities()
        assert await dump(store) == before


@pytest.mark.sqlite
async def test_refused_first_enrollment_mints_no_identity(tmp_path: Path) -> None:
    """A non-operator's enrollment before any registration is refused and mints no identity."""
    async with service_env(tmp_path) as (store, env):
        with pytest.raises(RelayPairingError) as caught:
            await env.pair(operator=False)
        assert caught.value.status == 409
        assert await store.identities() == {}


@pytest.mark.sqlite
async def test_accepted_enrollment_mints_the_identity_it_grants(tmp_path: Path) -> None:
    """An enrollment the relay accepts mints the profile's identity and grants that one."""
    async with service_env(tmp_path) as (store, env):
        await env.pair()
        await env.pair("beta")
        config = await env.config()
        assert (await store.identities())["beta"] == config.profiles["beta"].identity


# ── store URLs ────────────────────────────────────────────────────────────────

URL_CASES: dict[str, tuple[object, str]] = {
    "int": (5, "store URL must be a string, not int"),
    "bytes": (b"sqlite:///x.db", "store URL must be a string, not bytes"),
    "nul": ("sqlite:///{dir}/a\x00b.db", "store URL must not contain NUL"),
    "surrogate": ("sqlite:///{dir}/a\ud800.db", "must not contain unpaired surrogates"),
    "scheme": ("mysql://u@h/db", "unsupported store URL"),
    "sqlite-host": ("sqlite://relay.db", "sqlite store URL names host 'relay.db'"),
    "sqlite-memory": ("sqlite:///:memory:", "sqlite store URL needs a file path"),
    "sqlite-empty": ("sqlite://", "sqlite store URL needs a file path"),
    "sqlite-parameter": (
        "sqlite:///{dir}/new/x.db?timeout=5",
        "sqlite store URL takes no parameters",
    ),
    "sqlite-directory": ("sqlite:///{dir}", "is a directory, not a file"),
    "json-empty": ("json://", "json store URL needs a directory"),
    "json-parameter": ("json://{dir}/new?mode=1", "json store URL takes no parameters"),
    "json-file": ("json://{dir}/file", "exists and is not a directory"),
    "sqlite-name-too-long": ("sqlite:///{dir}/new/" + "a" * 256 + ".db", "longer than the file"),
    "sqlite-path-too-long": ("sqlite:///{dir}/" + "b/" * 2100 + "x.db", "longer than the file"),
    "sqlite-under-a-file": ("sqlite:///{dir}/file/x.db", "cannot be used: Not a directory"),
    "json-name-too-long": ("json://{dir}/" + "a" * 256, "longer than the file system allows"),
    "json-path-too-long": ("json://{dir}/" + "b/" * 2100, "longer than the file system allows"),
    "memory-path": ("memory://{dir}/relay", "memory store URL takes nothing after 'memory://'"),
    "memory-parameter": ("memory://?shared=1", "memory store URL takes nothing after"),
    "pg-port-range": ("postgresql://u@127.0.0.1:99999/db", "port 99999 is not in 1..65535"),
    "pg-port-zero": ("postgresql://u@127.0.0.1:0/db", "port 0 is not in 1..65535"),
    "pg-port-text": ("postgresql://u:s3cret@127.0.0.1:abc/db", "store URL is malformed"),
    "pg-no-database": ("postgres://u@127.0.0.1/", "needs a database name"),
    "pg-unknown": (
        "postgresql://u@127.0.0.1/db?keepalives=1",
        "unknown postgres store URL parameter 'keepalives'",
    ),
    "pg-repeated": (
        "postgresql://u@127.0.0.1/db?sslmode=require&sslmode=disable",
        "given more than once",
    ),
    "pg-sslmode": ("postgresql://u@127.0.0.1/db?sslmode=maybe", "sslmode='maybe': use one of"),
    "pg-ssl-and-sslmode": (
        "postgresql://u@127.0.0.1/db?ssl=require&sslmode=require",
        "both ssl and sslmode",
    ),
    "pg-timeout-text": (
        "postgresql://u@127.0.0.1/db?connect_timeout=soon",
        "connect_timeout must be",
    ),
    "pg-timeout-nan": (
        "postgresql://u@127.0.0.1/db?connect_timeout=nan",
        "connect_timeout must be",
    ),
    "pg-timeout-inf": (
        "postgresql://u@127.0.0.1/db?connect_timeout=inf",
        "connect_timeout must be",
    ),
    "pg-timeout-zero": ("postgresql://u@127.0.0.1/db?connect_timeout=0", "connect_timeout must be"),
    "pg-timeout-negative": (
        "postgresql://u@127.0.0.1/db?connect_timeout=-1",
        "connect_timeout must be",
    ),
    "pg-cache-negative": (
        "postgresql://u@127.0.0.1/db?prepared_statement_cache_size=-1",
        "prepared_statement_cache_size must be",
    ),
    "pg-cache-text": (
        "postgresql://u@127.0.0.1/db?prepared_statement_cache_size=none",
        "prepared_statement_cache_size must be",
    ),
    "pg-pool-size-zero": ("postgresql://u@127.0.0.1/db?pool_size=0", "pool_size must be"),
    "pg-pool-size-text": ("postgresql://u@127.0.0.1/db?pool_size=ten", "pool_size must be"),
    "pg-pool-idle-zero": ("postgresql://u@127.0.0.1/db?pool_max_idle=0", "pool_max_idle must be"),
    "pg-pool-lifetime-huge": (
        "postgresql://u@127.0.0.1/db?pool_max_lifetime=1e9",
        "pool_max_lifetime must be",
    ),
    "pg-statement-timeout-text": (
        "postgresql://u@127.0.0.1/db?statement_timeout=soon",
        "statement_timeout must be",
    ),
    "pg-lock-timeout-nan": ("postgresql://u@127.0.0.1/db?lock_timeout=nan", "lock_timeout must be"),
    "pg-ports-per-host-text": ("postgresql://u:s3cret@h1:1,h2:x/db", "a port is not a number"),
    "pg-cache-huge": (
        f"postgresql://u@127.0.0.1/db?prepared_statement_cache_size={HUGER}",
        "prepared_statement_cache_size must be",
    ),
}


@pytest.mark.parametrize(("url", "fragment"), URL_CASES.values(), ids=URL_CASES.keys())
async def test_bad_store_url_is_refused_and_creates_nothing(
    tmp_path: Path, url: object, fragment: str
) -> None:
    """A malformed URL or parameter is an InvalidInputError; nothing appears on disk."""
    (tmp_path / "file").write_text("not a directory")
    if isinstance(url, str):
        url = url.replace("{dir}", str(tmp_path))
    with pytest.raises(InvalidInputError) as caught:
        await open_store(url)  # type: ignore[arg-type]
    assert fragment in str(caught.value)
    assert "s3cret" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # noqa: ASYNC240 - a test
