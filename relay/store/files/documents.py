"""The JSON documents: how each state file is parsed (never crashing) and written.

The legacy files of the Python original first, then the files of our own beside them. One
module, past 300 lines: every codec shares the field checks at its top.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import UnionType
from typing import Any, Generic, TypeGuard, TypeVar

from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import records
from relay.store.checks import is_identity
from relay.store.rules import outbox
from relay.store.rules import runs as run_rules
from relay.store.rules.ledger import Ledger, oldest_first
from relay.store.rules.outbox import Outbox
from relay.store.rules.presence import Leases

D = TypeVar("D")
R = TypeVar("R")

CONFIG = "talaria-relay.json"
PROFILE_ID = ".talaria-relay-profile-id"


@dataclass(frozen=True, slots=True)
class Codec(Generic[D]):
    """One state file: how to read it (`None` when it is missing) and how to write it."""

    name: str
    parse: Callable[[bytes | None], D]
    dump: Callable[[D], str]


Check = Callable[[object], bool]


def _is(kind: type | UnionType) -> Check:
    return lambda value: isinstance(value, kind)


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def is_safe_integer(value: object) -> TypeGuard[int]:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def _count(value: object) -> bool:
    return is_safe_integer(value) and value >= 0


# The JSON keys of a record, in the order of its fields, each with the check its value must pass.
_SCOPE_LEDGER: dict[str, Check] = {"profileId": _text, "floor": _count, "sessions": _is(list)}
_ENTRY: dict[str, Check] = {"sessionId": _text, "startedAt": is_safe_integer, "sent": _is(bool)}
_CLAIM: dict[str, Check] = {"claimedBy": _text, "claimedUntil": is_safe_integer}
_VIEW: dict[str, Check] = {
    "id": _text,
    "sessionId": _text,
    "profile": _text,
    "through": _count,
    "identity": _is(str | None),
}
_SCOPE: dict[str, Check] = {"url": _is(str), "publisherId": _is(str), "profileId": _is(str)}
_LEASE: dict[str, Check] = {
    "profile": _text,
    "tabId": _text,
    "seq": is_safe_integer,
    "active": _is(bool),
    "expiresAt": is_safe_integer,
    "updatedAt": is_safe_integer,
}


def _values(item: object, spec: Mapping[str, Check]) -> list[Any] | None:
    """`item`'s values under `spec`'s keys, or None unless it is an object whose values all pass."""
    if not isinstance(item, dict):
        return None
    values = [item.get(key) for key in spec]
    return values if all(c(v) for c, v in zip(spec.values(), values, strict=True)) else None


def _record(make: Callable[..., R], *fields: Any, **named: Any) -> R | None:
    """The record `make` builds from stored fields, or None when they fail the record's checks.

    The key checks above pass what JSON can hold; a record's own limits (an id's length, a time
    that is not negative, an origin) are its constructor's, which raises `InvalidInputError`.
    """
    try:
        return make(*fields, **named)
    except InvalidInputError:
        return None


def _json(raw: bytes | None, problem: str | None = None) -> Any:
    """The decoded JSON, or None when missing; unparsable is None too, or `CorruptStateError`."""
    try:
        return None if raw is None else json.loads(raw)
    except (ValueError, RecursionError):
        if problem is None:
            return None
        raise CorruptStateError(problem) from None


def _member(data: Any, key: str, kind: type) -> Any:
    """`data[key]` of a version 1 document if it is a `kind`, else None."""
    value = data.get(key) if isinstance(data, dict) and data.get("version") == 1 else None
    return value if isinstance(value, kind) else None


def _document(key: str, value: object, *, sort_keys: bool = False) -> str:
    """A version 1 document holding `value` under `key`."""
    return json.dumps({"version": 1, key: value}, indent=2, sort_keys=sort_keys) + "\n"


def _camel(value: Any) -> Any:
    """`asdict(record)` with the camelCase keys of the JSON files."""
    if not isinstance(value, dict):
        return value
    return {re.sub(r"_(\w)", lambda m: m[1].upper(), k): _camel(v) for k, v in value.items()}


def parse_config(raw: bytes, generation: int) -> records.RelayConfig | None:
    data = _json(raw, "relay config is not valid JSON")
    if not isinstance(data, dict):
        raise CorruptStateError("relay config is not a JSON object")
    if data.get("version") != records.CONFIG_VERSION:
        return None  # an older registration: the server has to register again
    profiles: Any = data.get("profiles")
    fields: list[Any] = [data.get(k) for k in ("url", "publisher_id", "key_id", "private_key_path")]
    try:
        if isinstance(profiles, dict) and all(isinstance(g, dict) for g in profiles.values()):
            profiles = {
                name: records.ProfileGrant(grant.get("identity"), grant.get("profile_id"))
                for name, grant in profiles.items()
            }
        url, publisher_id, key_id, key_ref = fields
        return records.RelayConfig(url, publisher_id, key_id, key_ref, profiles, generation)
    except InvalidInputError as error:
        raise CorruptStateError(str(error)) from None


def dump_config(config: records.RelayConfig) -> str:
    # What the Python original wrote, byte for byte, so it can still read the file.
    profiles = {
        n: {"identity": g.identity, "profile_id": g.profile_id} for n, g in config.profiles.items()
    }
    data = {
        "key_id": config.key_id,
        "private_key_path": config.key_ref,
        "profiles": profiles,
        "publisher_id": config.publisher_id,
        "url": config.url,
        "version": records.CONFIG_VERSION,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _parse_revision(raw: bytes | None) -> int:
    try:
        return max(int(raw or b""), 0)
    except ValueError:
        return 0  # unreadable counts as 0: revisions still follow the clock


def _parse_started(raw: bytes | None) -> Ledger:
    """Tolerant, as the original: a malformed document is empty, malformed entries are skipped."""
    ledger: Ledger = {}
    for item in _member(_json(raw), "profiles", list) or ():
        fields = _values(item, _SCOPE_LEDGER)
        if fields is None or fields[0] in ledger:
            continue
        profile_id, floor, sessions = fields
        entries: dict[str, records.StartedEntry] = {}
        for session in sessions:
            if (values := _values(session, _ENTRY)) is None or values[0] in entries:
                continue
            claim = _values(session, _CLAIM) or [None, None]
            # A claim is a lease: one that fails its checks is dropped, not its entry.
            entry = _record(records.StartedEntry, profile_id, *values, *claim)
            if entry := entry or _record(records.StartedEntry, profile_id, *values):
                entries[values[0]] = entry
        scope = _record(records.StartedScope, profile_id, floor, oldest_first(entries.values()))
        if scope is not None:
            ledger[profile_id] = scope
    return ledger


def _dump_started(ledger: Ledger) -> str:
    # Claims are extra keys, absent when unset, so the file stays what the original wrote.
    scopes = [
        {
            "profileId": scope.profile_id,
            "floor": scope.floor,
            "sessions": [
                {k: v for k, v in _camel(asdict(e)).items() if k != "profileId" and v is not None}
                for e in scope.entries
            ],
        }
        for _, scope in sorted(ledger.items())
    ]
    return _document("profiles", scopes)


def _parse_deleted(raw: bytes | None) -> Outbox:
    """Strict: a deletion must never be dropped silently, so a bad outbox raises instead."""
    problem = "relay deleted-session outbox is invalid"
    if (data := _json(raw, problem)) is None:
        return {}
    items = _member(data, "views", list)
    views = [_deleted_view(item) for item in items] if items is not None else [None]
    if None in views:
        raise CorruptStateError(problem)
    outbox: Outbox = {}
    for view in views:
        assert view is not None
        outbox.setdefault((view.session_id, view.profile), view)
    return outbox


def _deleted_view(item: Any) -> records.DeletedView | None:
    if (values := _values(item, _VIEW)) is None:
        return None
    if (scope := item.get("scope")) is None:
        return _record(records.DeletedView, *values)
    parts = _values(scope, _SCOPE)
    bound = None if parts is None else _record(records.DeletedScope, *parts)
    return None if bound is None else _record(records.DeletedView, *values, scope=bound)


def _parse_presence(raw: bytes | None) -> Leases:
    """Tolerant: a lost lease only lets an alert through, and leases expire within minutes."""
    leases: Leases = {}
    for item in _member(_json(raw), "leases", list) or ():
        values = _values(item, _LEASE)
        if values is not None and (lease := _record(records.PresenceLease, *values)):
            leases.setdefault((values[0], values[1]), lease)
    return leases


def _parse_identities(raw: bytes | None) -> dict[str, str]:
    problem = "relay profile identities are invalid"
    if (data := _json(raw, problem)) is None:
        return {}
    identities = _member(data, "identities", dict)
    if identities is None or not all(isinstance(v, str) for v in identities.values()):
        raise CorruptStateError(problem)
    return dict(identities)


def _parse_profile_id(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    if not is_identity(identity := raw.decode("utf-8", errors="replace").strip()):
        raise CorruptStateError("invalid Talaria Relay profile identity")
    return identity


REVISION = Codec("talaria-relay-revision", _parse_revision, lambda floor: f"{floor}\n")
STARTED = Codec("talaria-relay-started.json", _parse_started, _dump_started)
DELETED = Codec(
    "talaria-relay-deleted.json",
    _parse_deleted,
    lambda outbox: _document("views", [_camel(asdict(v)) for v in outbox.values()]),
)
PRESENCE = Codec(
    "talaria-relay-presence.json",
    _parse_presence,
    lambda leases: _document("leases", [_camel(asdict(leases[k])) for k in sorted(leases)]),
)
IDENTITIES = Codec(
    "talaria-relay-identities.json",
    _parse_identities,
    lambda ids: _document("identities", dict(sorted(ids.items()))),
)
PROFILE_ID_DOC = Codec(PROFILE_ID, _parse_profile_id, lambda identity: f"{identity or ''}\n")


# Documents of our own, beside the legacy ones. Both are tolerant: a lost run row is republished
# by the replica hosting it on its next pass, and a lost claim only lets another process deliver
# the same deletion again, which the relay takes.

_RUN: dict[str, Check] = {
    "sessionId": _text,
    "streamId": _is(str | None),
    "profile": _is(str | None),
    "title": _text,
    "phase": _text,
    "startedAt": _count,
    "updatedAt": _count,
    "owner": _text,
    "leaseUntil": _count,
    "sendingBy": _is(str | None),
    "sendingUntil": _count,
    "takenFrom": _is(str | None),  # absent from files of earlier releases: None
}


def _parse_runs(raw: bytes | None) -> run_rules.Runs:
    runs: run_rules.Runs = {}
    for item in _member(_json(raw), "runs", list) or ():
        values = _values(item, _RUN)
        if values is not None and (run := _record(records.RunState, *values)):
            runs.setdefault(run.session_id, run)
    return runs


def _parse_forgotten(raw: bytes | None) -> run_rules.Forgotten:
    forgotten: run_rules.Forgotten = {}
    check = {"startedAt": _count, "streamId": _is(str | None), "forgottenAt": _count}
    for sid, item in (_member(_json(raw), "turns", dict) or {}).items():
        if (values := _values(item, check)) is not None:
            forgotten[sid] = ((values[0], values[1] or ""), values[2])
    return forgotten


def _dump_forgotten(forgotten: run_rules.Forgotten) -> str:
    turns = {
        sid: {"startedAt": started, "streamId": stream or None, "forgottenAt": at}
        for sid, ((started, stream), at) in sorted(forgotten.items())
    }
    return _document("turns", turns)


def _parse_claims(raw: bytes | None) -> outbox.Claims:
    claims: outbox.Claims = {}
    for view_id, item in (_member(_json(raw), "deleted", dict) or {}).items():
        if (values := _values(item, {"owner": _text, "until": _count})) is not None:
            claims[view_id] = (values[0], values[1])
    return claims


def _dump_claims(claims: outbox.Claims) -> str:
    deleted = {k: {"owner": o, "until": u} for k, (o, u) in sorted(claims.items())}
    return _document("deleted", deleted)


RUNS = Codec(
    "talaria-relay-runs.json",
    _parse_runs,
    lambda runs: _document("runs", [_camel(asdict(runs[sid])) for sid in sorted(runs)]),
)
CLAIMS = Codec("talaria-relay-claims.json", _parse_claims, _dump_claims)
# A lost file of forgotten turns lets a replica's older turn of a pruned session be saved again:
# what the store had before it remembered them, no worse.
FORGOTTEN = Codec("talaria-relay-turns.json", _parse_forgotten, _dump_forgotten)


# The fleet: one row per service, kept as the service wrote it (a newer release's fields too),
# so reading it names a corrupt row (`relay.store.rules.fleet.members`). An unreadable file is an
# empty fleet: every live service writes its row again within a lease.
def _parse_fleet(raw: bytes | None) -> dict[str, Any]:
    rows = _member(_json(raw), "fleet", dict) or {}
    return {str(owner): row for owner, row in rows.items()}


FLEET = Codec(
    "talaria-relay-fleet.json",
    _parse_fleet,
    lambda rows: _document("fleet", rows, sort_keys=True),
)
