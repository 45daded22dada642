"""`JsonDocuments`: the rulebook's documents as JSON files in the legacy layout of the original.

An existing state dir keeps working: `talaria-relay.json`, `talaria-relay-publisher-<hash>.pem`,
`talaria-relay-revision` and `talaria-relay-started.json` are read and written as it wrote them,
and with profile homes each profile's identity is in its home (`<home>/.talaria-relay-profile-id`;
a home belongs to its user: it may be missing, and it holds other programs' files beside ours).
What it kept in memory (deleted outbox, presence leases) and what it never had (runs, claims,
forgotten turns) get files beside them. Every session holds the sidecar lock
`.talaria-relay.lock`, in a worker thread, and writes back only the files whose text changed, all
of them or none (`relay.store.files.io.commit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from relay.errors import CorruptStateError, StoreError, StoreUnavailableError
from relay.store.files import documents as files
from relay.store.files.io import JOURNAL, Write, commit, read, remove_stale, stale_temps
from relay.store.files.lock import DirLock
from relay.store.rules import documents as docs
from relay.store.rules.documents import Doc, IdentityTable, StoredRegistration

D = TypeVar("D")
R = TypeVar("R")

# Publisher keys as before: `key_ref` names them so, 0600; `load_key` reads no other file.
KEY_FILE = re.compile(r"talaria-relay-publisher-[0-9a-f]{16}\.pem")
ProfileHome = Callable[[str], Path]
_PASSING = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EAGAIN, errno.EBUSY}
# The documents that are one file each, by the rulebook's name.
_FILES: dict[str, files.Codec[Any]] = {
    docs.FLOOR.name: files.REVISION,
    docs.STARTED.name: files.STARTED,
    docs.DELETED.name: files.DELETED,
    docs.CLAIMS.name: files.CLAIMS,
    docs.PRESENCE.name: files.PRESENCE,
    docs.FORGOTTEN.name: files.FORGOTTEN,
    docs.RUNS.name: files.RUNS,
    docs.FLEET.name: files.FLEET,
}
# The order a session writes in. Writes of several files are all or none anyway (the journal);
# this order only makes the state between two renames the likelier one to make sense alone.
_ORDER = (docs.KEYS.name, docs.CONFIG.name, docs.IDENTITIES.name, *_FILES)


@dataclass(slots=True)
class HomeIdentities:
    """The `Identities` of a JSON store with profile homes, read as asked, written on commit."""

    home: ProfileHome
    registration: Callable[[], StoredRegistration]
    # profile -> identity; None: forgotten
    changed: dict[str, str | None] = field(default_factory=dict)

    def _path(self, profile: str) -> Path:
        return Path(self.home(profile)) / files.PROFILE_ID

    def get(self, profile: str) -> str | None:
        if profile in self.changed:
            return self.changed[profile]
        if not self.holds(profile):
            raise StoreError(f"the home of profile {profile!r} is unavailable")
        return files.PROFILE_ID_DOC.parse(read(self._path(profile)))

    def set(self, profile: str, identity: str) -> None:
        self.changed[profile] = identity

    def forget(self, profile: str) -> None:
        self.changed[profile] = None

    def holds(self, profile: str) -> bool:
        return Path(self.home(profile)).is_dir()

    def known(self) -> Iterable[str]:
        config = self.registration().read()
        return list(config.profiles) if config else []

    def writes(self) -> list[Write]:
        """What to write; a killed writer's temps in each home written go first (the caller
        holds the exclusive lock)."""
        for profile, identity in self.changed.items():
            if identity is not None:
                remove_stale(self._path(profile).parent)
        return [
            Write(self._path(p), None if i is None else files.PROFILE_ID_DOC.dump(i))
            for p, i in self.changed.items()
            if i is not None or self.holds(p)  # no home: nothing to forget
        ]


class JsonDocuments:
    """The documents of one state dir (`json:///state-dir`), safe across threads and processes."""

    name = "json"

    def __init__(self, state_dir: Path, profile_home: ProfileHome | None = None) -> None:
        self.directory = Path(state_dir).absolute()
        self.profile_home = profile_home
        self.lock = DirLock(self.directory)
        self.display_url = f"json://{self.directory}"

    @classmethod
    async def open(cls, state_dir: Path, profile_home: ProfileHome | None = None) -> JsonDocuments:
        """The state dir, created (0700) when missing, its killed writer's change finished and
        its temps removed."""
        documents = cls(state_dir, profile_home)
        await documents.run(documents._prepare)
        return documents

    async def close(self) -> None:
        """Nothing to release: every session opens and closes its own files."""

    @contextlib.contextmanager
    def session(self, *, write: bool) -> Iterator[_Session]:
        with self.lock.locked(exclusive=write):
            session = _Session(self, write=write)
            yield session
            if write:
                commit(self.directory, session.writes())

    async def run(self, work: Callable[[], R]) -> R:
        """Run blocking file work in a thread, reporting OS failures as `StoreError`."""
        try:
            return await asyncio.to_thread(work)
        except OSError as exc:
            # A full or read-only file system passes: it is unavailable, not misconfigured.
            kind = StoreUnavailableError if exc.errno in _PASSING else StoreError
            raise kind(f"relay state in {self.directory} is inaccessible: {exc}") from exc

    def key_ref(self, key_id: str) -> str:
        digest = hashlib.sha256(key_id.encode()).hexdigest()[:16]
        return str(self.directory / f"talaria-relay-publisher-{digest}.pem")

    def key_named(self, ref: str) -> str | None:
        """Only ever a key file inside the store: a legacy config names the key by its absolute
        path, and its namesake here keeps a moved state dir working."""
        name = ref.replace("\\", "/").rsplit("/", 1)[-1]
        return None if KEY_FILE.fullmatch(name) is None else str(self.directory / name)

    def registration(self) -> StoredRegistration:
        """The config file; its generation is its mtime (0 for none, or an older version)."""
        path = self.directory / files.CONFIG
        raw = read(path)
        if raw is None:
            return StoredRegistration()
        mtime = path.stat().st_mtime_ns
        try:
            config = files.parse_config(raw, mtime)
        except CorruptStateError as error:
            return StoredRegistration(None, mtime, f"{path}: {error}")
        return StoredRegistration(config, mtime if config else 0)

    def _prepare(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True)
            os.chmod(self.directory, 0o700)  # mkdir's mode went through the umask
        except FileExistsError:
            if not self.directory.is_dir():
                raise StoreError(f"relay state dir {self.directory} is not a directory") from None
        # Usually there is nothing to sweep, and opening takes no lock.
        if stale_temps(self.directory) or (self.directory / JOURNAL).exists():
            with self.lock.locked(exclusive=True):  # which finishes the change
                remove_stale(self.directory)


class _Session:
    """The documents read under one lock; what changed, as writes in `_ORDER`."""

    def __init__(self, owner: JsonDocuments, *, write: bool) -> None:
        self._dir = owner.directory
        self._owner = owner
        self._write = write  # a reading session keeps no copy to compare
        self._values: dict[str, Any] = {}
        self._before: dict[str, Any] = {}  # what each document was, as written

    def get(self, doc: Doc[D]) -> D:
        if doc.name not in self._values:
            self._values[doc.name] = self._load(doc.name)
        value: D = self._values[doc.name]
        return value

    def put(self, doc: Doc[D], value: D) -> None:
        self.get(doc)  # what it was, to compare
        self._values[doc.name] = value

    def _load(self, name: str) -> Any:
        if name == docs.CONFIG.name:
            self._before[name] = registration = self._owner.registration()
            return registration
        if name == docs.KEYS.name:
            # Every key file by its path, never through a link; None for one not text.
            keys: docs.Keys = {}
            for path in sorted(self._dir.iterdir()):
                if KEY_FILE.fullmatch(path.name) is None or path.is_symlink() or not path.is_file():
                    continue
                if (raw := read(path)) is not None:
                    try:
                        keys[str(path)] = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        keys[str(path)] = None
            self._before[name] = dict(keys)
            return keys
        if name == docs.IDENTITIES.name and self._owner.profile_home is not None:
            return HomeIdentities(self._owner.profile_home, lambda: self.get(docs.CONFIG))
        codec = files.IDENTITIES if name == docs.IDENTITIES.name else _FILES[name]
        value = codec.parse(read(self._dir / codec.name))
        if self._write:
            self._before[name] = codec.dump(value)
        return IdentityTable(value) if name == docs.IDENTITIES.name else value

    def writes(self) -> list[Write]:
        return [w for n in _ORDER if n in self._values for w in self._writes(n, self._values[n])]

    def _writes(self, name: str, value: Any) -> list[Write]:
        if name == docs.CONFIG.name:
            if value is self._before[name]:
                return []
            path = self._dir / files.CONFIG
            if value.config is None:  # forgotten (`talaria-relay unpair`): no config file
                return [Write(path, None)]
            # `generation` is the mtime: keep it rising even when two saves share a clock tick.
            previous = path.stat().st_mtime_ns if path.exists() else 0
            mtime = max(time.time_ns(), previous + 1)
            return [Write(path, files.dump_config(value.config), mtime)]
        if name == docs.KEYS.name:
            before: docs.Keys = self._before[name]
            return [
                Write(Path(ref), value.get(ref))
                for ref in sorted(before.keys() | value.keys())
                if value.get(ref) != before.get(ref) or (ref in before) != (ref in value)
            ]
        if isinstance(value, HomeIdentities):
            return value.writes()
        codec = files.IDENTITIES if name == docs.IDENTITIES.name else _FILES[name]
        text = codec.dump(dict(value) if isinstance(value, IdentityTable) else value)
        return [] if text == self._before[name] else [Write(self._dir / codec.name, text)]
