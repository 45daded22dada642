"""`FileStore`: relay state as JSON files in the legacy layout of the Python original.

An existing state dir keeps working: `talaria-relay.json`, `talaria-relay-publisher-<hash>.pem`,
`talaria-relay-revision` and `talaria-relay-started.json` are read and written as it wrote them.
What it kept in memory (deleted outbox, presence leases) gets files beside them. Every method is one
read-modify-write under the sidecar lock `.talaria-relay.lock`, run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import UnionType
from typing import Any, Generic, TypeVar

from relay.errors import CorruptStateError, InvalidInputError, StaleConfigError, StoreError
from relay.store.base import (
    CONFIG_VERSION,
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayConfig,
    RelayStore,
    StartedEntry,
    StartedScope,
    StateBatch,
    checked_batch,
    checked_claim,
    checked_config,
    checked_deletion,
    checked_key,
    checked_lease,
    checked_name,
    checked_scope,
    checked_time,
    config_problem,
    is_identity,
    is_safe_integer,
    new_sightings,
    started_cutoff,
)

D = TypeVar("D")
R = TypeVar("R")
ProfileHome = Callable[[str], Path]

CONFIG = "talaria-relay.json"
LOCK = ".talaria-relay.lock"
PROFILE_ID = ".talaria-relay-profile-id"
_temp_names = itertools.count()

_Ledger = dict[str, StartedScope]  # by profile_id
_Leases = dict[tuple[str, str], PresenceLease]  # by (profile, tab_id)


@dataclass(frozen=True, slots=True)
class _Document(Generic[D]):
    """One state file: how to read it (`None` when it is missing) and how to write it."""

    name: str
    parse: Callable[[bytes | None], D]
    dump: Callable[[D], str]


class FileStore(RelayStore):
    """Relay state in one directory (`json:///state-dir`), safe across threads and processes."""

    def __init__(self, state_dir: Path, profile_home: ProfileHome | None = None) -> None:
        self._dir = Path(state_dir).absolute()
        self._profile_home = profile_home
        # flock excludes other processes; this keeps this process's threads out of each other's way.
        self._mutex = threading.Lock()

    @classmethod
    async def open(cls, state_dir: Path, *, profile_home: ProfileHome | None = None) -> FileStore:
        """The store of `state_dir`, created (0700) when missing."""
        store = cls(state_dir, profile_home)
        await store._call(store._create_dir)
        return store

    @property
    def display_url(self) -> str:
        return f"json://{self._dir}"

    async def close(self) -> None:
        """Nothing to release: every method opens and closes its own files."""

    # ── registration and key ──────────────────────────────────────────────────

    async def load_config(self) -> RelayConfig | None:
        def work() -> RelayConfig | None:
            path = self._dir / CONFIG
            with self._locked(exclusive=False):
                raw = _read(path)
                try:
                    return None if raw is None else _parse_config(raw, path.stat().st_mtime_ns)
                except CorruptStateError as error:
                    raise CorruptStateError(f"{path}: {error}") from None

        return await self._call(work)

    async def save_config(
        self, config: RelayConfig, *, expected_generation: int | None = None
    ) -> None:
        checked_config(config)

        def work() -> None:
            path = self._dir / CONFIG
            with self._locked(exclusive=True):
                if self._key_path(config.key_ref) is None:
                    raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
                # `generation` is the mtime: keep it rising even when two saves share a clock tick.
                previous = path.stat().st_mtime_ns if path.exists() else 0
                if expected_generation is not None and self._shown(path) != expected_generation:
                    raise StaleConfigError("the relay registration changed since it was read")
                _write(path, _dump_config(config), max(time.time_ns(), previous + 1))

        await self._call(work)

    @staticmethod
    def _shown(path: Path) -> int:
        """The generation `load_config` shows: 0 for no registration (absent or not version 2)."""
        raw = _read(path)
        try:
            return 0 if raw is None or _parse_config(raw, 0) is None else path.stat().st_mtime_ns
        except CorruptStateError:
            return path.stat().st_mtime_ns

    async def save_key(self, key_id: str, pem: str) -> str:
        checked_name("key_id", key_id)
        checked_key(pem)
        digest = hashlib.sha256(key_id.encode()).hexdigest()[:16]
        path = self._dir / f"talaria-relay-publisher-{digest}.pem"

        def work() -> str:
            with self._locked(exclusive=True):
                _write(path, pem)
            return str(path)

        return await self._call(work)

    async def load_key(self, ref: str) -> str:
        checked_name("key reference", ref)

        def work() -> bytes | None:
            with self._locked(exclusive=False):
                path = self._key_path(ref)
                return None if path is None else _read(path)

        raw = await self._call(work)
        if raw is None:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is missing")
        return raw.decode("utf-8", errors="replace")

    def _key_path(self, ref: str) -> Path | None:
        """The key file `ref` names, else its namesake here: a moved state dir keeps working."""
        named, moved = Path(ref), self._dir / Path(ref).name
        if named.is_file():
            return named
        return moved if moved.suffix == ".pem" and moved.is_file() else None

    # ── profile identities ────────────────────────────────────────────────────

    async def profile_identity(self, profile: str) -> str:
        checked_name("profile", profile)
        minted = f"pfi_{uuid.uuid4().hex}"
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], str]:
                identities.setdefault(profile, minted)
                return identities, _checked_identity(identities[profile])

            return await self._update(_IDENTITIES, edit)
        home = Path(self._profile_home(profile))
        if not await asyncio.to_thread(home.is_dir):
            raise StoreError(f"the home of profile {profile!r} is unavailable")

        def mint(stored: str | None) -> tuple[str, str]:
            return stored or minted, stored or minted

        return await self._update(_PROFILE_ID, mint, home / PROFILE_ID)

    async def forget_profile_identity(self, profile: str) -> None:
        checked_name("profile", profile)
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], None]:
                identities.pop(profile, None)
                return identities, None

            return await self._update(_IDENTITIES, edit)
        home = Path(self._profile_home(profile))

        def work() -> None:
            with self._locked(exclusive=True), contextlib.suppress(FileNotFoundError):
                (home / PROFILE_ID).unlink()
                _fsync_dir(home)

        return await self._call(work)

    # ── revisions ─────────────────────────────────────────────────────────────

    async def allocate_revisions(self, count: int, now_ms: int) -> list[int]:
        checked_time("now_ms", now_ms)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError("count must be a non-negative integer")
        if count == 0:
            return []

        def edit(floor: int) -> tuple[int, list[int]]:
            first = max(floor + 1, now_ms)
            return first + count - 1, list(range(first, first + count))

        return await self._update(_REVISION, edit)

    async def revision_floor(self) -> int:
        return await self._load(_REVISION)

    # ── started ledger ────────────────────────────────────────────────────────

    async def track_started(self, profile_ids: Iterable[str], now_ms: int) -> None:
        checked_time("now_ms", now_ms)
        scopes = [checked_name("profile_id", p) for p in profile_ids]

        def edit(ledger: _Ledger) -> tuple[_Ledger, None]:
            for scope in scopes:
                ledger.setdefault(scope, StartedScope(scope, now_ms))
            return ledger, None

        await self._update(_STARTED, edit)

    async def record_started(
        self, profile_id: str, seen: Iterable[tuple[str, int]], now_ms: int
    ) -> None:
        checked_name("profile_id", profile_id)
        checked_time("now_ms", now_ms)
        sightings = list(seen)

        def edit(ledger: _Ledger) -> tuple[_Ledger, None]:
            scope = ledger.get(profile_id) or StartedScope(profile_id, now_ms)
            cutoff = started_cutoff(scope.floor, now_ms)
            kept = {e.session_id: e for e in scope.entries if e.started_at >= cutoff}
            for sid, started_at in new_sightings(sightings, cutoff).items():
                kept.setdefault(sid, StartedEntry(profile_id, sid, started_at))
            ledger[profile_id] = replace(scope, entries=_oldest_first(kept.values()))
            return ledger, None

        await self._update(_STARTED, edit)

    async def claim_started(
        self, profile_id: str, owner: str, now_ms: int, lease_ms: int, limit: int | None = None
    ) -> list[StartedEntry]:
        checked_claim(profile_id, owner, now_ms, lease_ms, limit)

        def claimable(entry: StartedEntry) -> bool:
            expired = entry.claimed_until is None or entry.claimed_until <= now_ms
            return not entry.sent and (entry.claimed_by in (None, owner) or expired)

        def edit(ledger: _Ledger) -> tuple[_Ledger, list[StartedEntry]]:
            scope = ledger.get(profile_id)
            if scope is None:
                return ledger, []
            claims = {
                e.session_id: replace(e, claimed_by=owner, claimed_until=now_ms + lease_ms)
                for e in _oldest_first(filter(claimable, scope.entries))[:limit]
            }
            entries = tuple(claims.get(e.session_id, e) for e in scope.entries)
            ledger[profile_id] = replace(scope, entries=entries)
            return ledger, list(claims.values())

        return await self._update(_STARTED, edit)

    async def mark_started_sent(self, profile_id: str, session_id: str) -> None:
        checked_name("profile_id", profile_id)
        checked_name("session_id", session_id)

        def edit(ledger: _Ledger) -> tuple[_Ledger, None]:
            if (scope := ledger.get(profile_id)) is not None:
                sent = (
                    replace(e, sent=True, claimed_by=None, claimed_until=None)
                    if e.session_id == session_id
                    else e
                    for e in scope.entries
                )
                ledger[profile_id] = replace(scope, entries=tuple(sent))
            return ledger, None

        await self._update(_STARTED, edit)

    async def started_ledger(self) -> list[StartedScope]:
        ledger = await self._load(_STARTED)
        return [ledger[profile_id] for profile_id in sorted(ledger)]

    # ── deleted-session outbox ────────────────────────────────────────────────

    async def enqueue_deleted(
        self,
        session_id: str,
        profile: str,
        now_ms: int,
        *,
        session_live: bool,
        identity: str | None,
        scope: DeletedScope | None,
    ) -> DeletedView:
        checked_deletion(session_id, profile, now_ms, identity, scope)

        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], DeletedView]:
            for index, view in enumerate(views):
                if (view.session_id, view.profile) == (session_id, profile):
                    # A session that still has data pushes `through` on, to cover newer runs.
                    if session_live and now_ms > view.through:
                        views[index] = replace(view, through=now_ms)
                    return views, views[index]
            fresh = DeletedView(str(uuid.uuid4()), session_id, profile, now_ms, identity, scope)
            return [*views, fresh], fresh

        return await self._update(_DELETED, edit)

    async def bind_deleted(self, profile: str, identity: str, scope: DeletedScope) -> int:
        checked_name("profile", profile)
        checked_name("identity", identity)
        checked_scope(scope)

        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], int]:
            unbound = [
                v.profile == profile and v.scope is None and v.identity in (None, identity)
                for v in views
            ]
            views = [
                replace(v, identity=identity, scope=scope) if free else v
                for v, free in zip(views, unbound, strict=True)
            ]
            return views, sum(unbound)

        return await self._update(_DELETED, edit)

    async def pending_deleted(self) -> list[DeletedView]:
        views = await self._load(_DELETED)
        return sorted(views, key=lambda v: (v.through, v.id))

    async def ack_deleted(self, view_id: str, through: int) -> bool:
        checked_name("view id", view_id)
        checked_time("through", through)

        def edit(views: list[DeletedView]) -> tuple[list[DeletedView], bool]:
            kept = [v for v in views if (v.id, v.through) != (view_id, through)]
            return kept, len(kept) < len(views)

        return await self._update(_DELETED, edit)

    # ── presence leases ───────────────────────────────────────────────────────

    async def apply_presence(
        self,
        profile: str,
        tab_id: str,
        seq: int,
        active: bool,
        now_ms: int,
        *,
        lease_ms: int,
        fence_ms: int,
        max_tabs: int,
    ) -> bool:
        checked_lease(profile, tab_id, seq, active, now_ms, lease_ms, fence_ms, max_tabs)
        key = (profile, tab_id)

        def edit(leases: _Leases) -> tuple[_Leases, bool]:
            leases = {k: v for k, v in leases.items() if v.expires_at + fence_ms > now_ms}
            stored = leases.get(key)
            # The sequence fence: a stale or replayed update changes nothing.
            if stored is not None and stored.seq >= seq:
                return leases, False
            leases[key] = PresenceLease(profile, tab_id, seq, active, now_ms + lease_ms, now_ms)
            while len(leases) > max_tabs:
                others = (k for k in leases if k != key)
                del leases[min(others, key=lambda k: (leases[k].updated_at, k))]
            return leases, True

        return await self._update(_PRESENCE, edit)

    async def presence_active(self, profile: str, now_ms: int) -> bool:
        checked_name("profile", profile)
        checked_time("now_ms", now_ms)
        leases = (await self._load(_PRESENCE)).values()
        return any(v.profile == profile and v.active and v.expires_at > now_ms for v in leases)

    async def presence_leases(self) -> list[PresenceLease]:
        leases = (await self._load(_PRESENCE)).values()
        return sorted(leases, key=lambda v: (-v.updated_at, v.profile, v.tab_id))

    # ── copying between stores ────────────────────────────────────────────────

    async def identities(self) -> dict[str, str]:
        if self._profile_home is None:
            stored = await self._load(_IDENTITIES)
            return {name: value for name, value in stored.items() if is_identity(value)}
        config = await self.load_config()
        found: dict[str, str] = {}
        for name in config.profiles if config else ():
            path = Path(self._profile_home(name)) / PROFILE_ID
            with contextlib.suppress(CorruptStateError, StoreError):
                if (identity := await self._load(_PROFILE_ID, path)) is not None:
                    found[name] = identity
        return found

    async def merge_state(self, batch: StateBatch) -> None:
        checked_batch(batch)
        for profile, identity in batch.identities.items():
            await self._merge_identity(profile, identity)
        await self._update(_REVISION, lambda floor: (max(floor, batch.revision_floor), None))
        if batch.started:
            await self._update(
                _STARTED, lambda ledger: (_merge_started(ledger, batch.started), None)
            )
        if batch.deleted:
            await self._update(_DELETED, lambda views: (_merge_deleted(views, batch.deleted), None))
        if batch.presence:
            await self._update(
                _PRESENCE, lambda leases: (_merge_presence(leases, batch.presence), None)
            )

    async def _merge_identity(self, profile: str, identity: str) -> None:
        if self._profile_home is None:

            def edit(identities: dict[str, str]) -> tuple[dict[str, str], None]:
                identities.setdefault(profile, identity)
                return identities, None

            return await self._update(_IDENTITIES, edit)
        home = Path(self._profile_home(profile))
        if await asyncio.to_thread(home.is_dir):
            await self._update(
                _PROFILE_ID, lambda stored: (stored or identity, None), home / PROFILE_ID
            )
        return None

    # ── locked file work ──────────────────────────────────────────────────────

    async def _call(self, work: Callable[[], R]) -> R:
        """Run blocking file work in a thread, reporting OS failures as `StoreError`."""

        def guarded() -> R:
            try:
                return work()
            except OSError as exc:
                raise StoreError(f"relay state in {self._dir} is inaccessible: {exc}") from exc

        return await asyncio.to_thread(guarded)

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        # A sidecar lock file: a lock on a file that gets replaced would hold only its old inode.
        with self._mutex:
            fd = os.open(self._dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                yield
            finally:
                os.close(fd)

    async def _load(self, doc: _Document[D], path: Path | None = None) -> D:
        def work() -> D:
            with self._locked(exclusive=False):
                return doc.parse(_read(path or self._dir / doc.name))

        return await self._call(work)

    async def _update(
        self, doc: _Document[D], edit: Callable[[D], tuple[D, R]], path: Path | None = None
    ) -> R:
        """Read, edit and (only if its text changed) rewrite one document, all under the lock."""
        target = path or self._dir / doc.name

        def work() -> R:
            with self._locked(exclusive=True):
                value = doc.parse(_read(target))
                before = doc.dump(value)  # now: `edit` may change `value` in place
                value, result = edit(value)
                if (after := doc.dump(value)) != before:
                    _write(target, after)
                return result

        return await self._call(work)

    def _create_dir(self) -> None:
        try:
            self._dir.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            if not self._dir.is_dir():
                raise StoreError(f"relay state dir {self._dir} is not a directory") from None
            return
        os.chmod(self._dir, 0o700)  # mkdir's mode went through the umask


# ── files ─────────────────────────────────────────────────────────────────────


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, text: str, mtime_ns: int | None = None) -> None:
    """Replace `path` atomically and durably by a 0600 file; on failure the old file stays."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{next(_temp_names)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)  # the umask may have narrowed it
            handle.write(text.encode())
            handle.flush()
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            os.fsync(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # A rename or unlink is durable only once its directory is.
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ── documents ─────────────────────────────────────────────────────────────────

Check = Callable[[object], bool]


def _is(kind: type | UnionType) -> Check:
    return lambda value: isinstance(value, kind)


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


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
    passed = all(check(v) for check, v in zip(spec.values(), values, strict=True))
    return values if passed else None


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


def _json_text(value: object, *, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=2, sort_keys=sort_keys) + "\n"


def _camel(value: Any) -> Any:
    """`asdict(record)` with the camelCase keys of the JSON files."""
    if not isinstance(value, dict):
        return value
    return {re.sub(r"_(\w)", lambda m: m[1].upper(), k): _camel(v) for k, v in value.items()}


def _parse_config(raw: bytes, generation: int) -> RelayConfig | None:
    data = _json(raw, "relay config is not valid JSON")
    if not isinstance(data, dict):
        raise CorruptStateError("relay config is not a JSON object")
    if data.get("version") != CONFIG_VERSION:
        return None  # an older registration: the server has to register again
    profiles: Any = data.get("profiles")
    if isinstance(profiles, dict) and all(isinstance(g, dict) for g in profiles.values()):
        profiles = {
            name: ProfileGrant(grant.get("identity"), grant.get("profile_id"))
            for name, grant in profiles.items()
        }
    fields: list[Any] = [data.get(k) for k in ("url", "publisher_id", "key_id", "private_key_path")]
    url, publisher_id, key_id, key_ref = fields
    if problem := config_problem(url, publisher_id, key_id, key_ref, profiles):
        raise CorruptStateError(problem)
    return RelayConfig(url, publisher_id, key_id, key_ref, profiles, generation)


def _dump_config(config: RelayConfig) -> str:
    # What the Python original wrote, byte for byte, so it can still read the file.
    profiles = {
        n: {"identity": g.identity, "profile_id": g.profile_id} for n, g in config.profiles.items()
    }
    return _json_text(
        {
            "key_id": config.key_id,
            "private_key_path": config.key_ref,
            "profiles": profiles,
            "publisher_id": config.publisher_id,
            "url": config.url,
            "version": CONFIG_VERSION,
        },
        sort_keys=True,
    )


def _parse_revision(raw: bytes | None) -> int:
    try:
        return max(int(raw or b""), 0)
    except ValueError:
        return 0  # unreadable counts as 0: revisions still follow the clock


def _parse_started(raw: bytes | None) -> _Ledger:
    """Tolerant, as the original: a malformed document is empty, malformed entries are skipped."""
    ledger: _Ledger = {}
    for item in _member(_json(raw), "profiles", list) or ():
        fields = _values(item, _SCOPE_LEDGER)
        if fields is None or fields[0] in ledger:
            continue
        profile_id, floor, sessions = fields
        entries: dict[str, StartedEntry] = {}
        for session in sessions:
            if (values := _values(session, _ENTRY)) is not None:
                claim = _values(session, _CLAIM) or [None, None]
                entries.setdefault(values[0], StartedEntry(profile_id, *values, *claim))
        ledger[profile_id] = StartedScope(profile_id, floor, _oldest_first(entries.values()))
    return ledger


def _dump_started(ledger: _Ledger) -> str:
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
    return _json_text({"version": 1, "profiles": scopes})


def _oldest_first(entries: Iterable[StartedEntry]) -> tuple[StartedEntry, ...]:
    return tuple(sorted(entries, key=lambda e: (e.started_at, e.session_id)))


def _merge_started(ledger: _Ledger, scopes: Iterable[StartedScope]) -> _Ledger:
    for scope in scopes:
        mine = ledger.get(scope.profile_id)
        floor = scope.floor if mine is None else min(mine.floor, scope.floor)
        entries = {e.session_id: e for e in (mine.entries if mine else ())}
        for entry in scope.entries:
            kept = entries.get(entry.session_id)
            if kept is None:
                entries[entry.session_id] = replace(entry, claimed_by=None, claimed_until=None)
            elif entry.sent and not kept.sent:
                entries[entry.session_id] = replace(kept, sent=True)
        ledger[scope.profile_id] = StartedScope(
            scope.profile_id, floor, _oldest_first(entries.values())
        )
    return ledger


def _merge_deleted(views: list[DeletedView], incoming: Iterable[DeletedView]) -> list[DeletedView]:
    for view in incoming:
        key = (view.session_id, view.profile)
        index = next((i for i, v in enumerate(views) if (v.session_id, v.profile) == key), None)
        if index is None:
            views.append(view)
            continue
        kept = views[index]
        kept = replace(kept, through=max(kept.through, view.through))
        if kept.scope is None and view.scope is not None:
            kept = replace(kept, identity=view.identity, scope=view.scope)
        views[index] = kept
    return views


def _merge_presence(leases: _Leases, incoming: Iterable[PresenceLease]) -> _Leases:
    for lease in incoming:
        key = (lease.profile, lease.tab_id)
        if key not in leases or leases[key].seq < lease.seq:
            leases[key] = lease
    return leases


def _parse_deleted(raw: bytes | None) -> list[DeletedView]:
    """Strict: a deletion must never be dropped silently, so a bad outbox raises instead."""
    problem = "relay deleted-session outbox is invalid"
    if (data := _json(raw, problem)) is None:
        return []
    items = _member(data, "views", list)
    views = [_deleted_view(item) for item in items] if items is not None else [None]
    if None in views:
        raise CorruptStateError(problem)
    return [v for v in views if v is not None]


def _deleted_view(item: Any) -> DeletedView | None:
    if (values := _values(item, _VIEW)) is None:
        return None
    if (scope := item.get("scope")) is None:
        return DeletedView(*values)
    parts = _values(scope, _SCOPE)
    return None if parts is None else replace(DeletedView(*values), scope=DeletedScope(*parts))


def _dump_deleted(views: list[DeletedView]) -> str:
    return _json_text({"version": 1, "views": [_camel(asdict(v)) for v in views]})


def _parse_presence(raw: bytes | None) -> _Leases:
    """Tolerant: a lost lease only lets an alert through, and leases expire within minutes."""
    leases: _Leases = {}
    for item in _member(_json(raw), "leases", list) or ():
        if (values := _values(item, _LEASE)) is not None:
            leases.setdefault((values[0], values[1]), PresenceLease(*values))
    return leases


def _dump_presence(leases: _Leases) -> str:
    items = [_camel(asdict(lease)) for _, lease in sorted(leases.items())]
    return _json_text({"version": 1, "leases": items})


def _parse_identities(raw: bytes | None) -> dict[str, str]:
    problem = "relay profile identities are invalid"
    if (data := _json(raw, problem)) is None:
        return {}
    identities = _member(data, "identities", dict)
    if identities is None or not all(isinstance(v, str) for v in identities.values()):
        raise CorruptStateError(problem)
    return dict(identities)


def _checked_identity(stored: str) -> str:
    if not is_identity(identity := stored.strip()):
        raise CorruptStateError("invalid Talaria Relay profile identity")
    return identity


def _parse_profile_id(raw: bytes | None) -> str | None:
    return None if raw is None else _checked_identity(raw.decode("utf-8", errors="replace"))


_REVISION = _Document("talaria-relay-revision", _parse_revision, lambda floor: f"{floor}\n")
_STARTED = _Document("talaria-relay-started.json", _parse_started, _dump_started)
_DELETED = _Document("talaria-relay-deleted.json", _parse_deleted, _dump_deleted)
_PRESENCE = _Document("talaria-relay-presence.json", _parse_presence, _dump_presence)
_IDENTITIES = _Document(
    "talaria-relay-identities.json",
    _parse_identities,
    lambda ids: _json_text({"version": 1, "identities": dict(sorted(ids.items()))}),
)
_PROFILE_ID = _Document(PROFILE_ID, _parse_profile_id, lambda identity: f"{identity or ''}\n")
