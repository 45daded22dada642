"""A publishing pass's read and write on the state dir: several files, under one lock each time."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from relay.errors import CorruptStateError, StoreError
from relay.store.files.documents import (
    _DELETED,
    _IDENTITIES,
    _PRESENCE,
    _PROFILE_ID,
    _REVISION,
    _STARTED,
    CONFIG,
    PROFILE_ID,
    _Document,
    _parse_config,
)
from relay.store.files.io import _read, _write_all
from relay.store.files.locked import LockedDir
from relay.store.files.runs import _CLAIMS, _FORGOTTEN, _RUNS
from relay.store.records import RunState
from relay.store.rules import passes

D = TypeVar("D")


def shown_generation(path: Path) -> int:
    """The generation `load_config` shows: 0 for no registration (absent or not version 2), the
    file's mtime otherwise (an invalid one's too: reading it is what raises)."""
    raw = _read(path)
    try:
        return 0 if raw is None or _parse_config(raw, 0) is None else path.stat().st_mtime_ns
    except CorruptStateError:
        return path.stat().st_mtime_ns


class PassFiles(LockedDir):
    """The pass hooks of `StoreGate` on the state dir."""

    _profile_home: Callable[[str], Path] | None

    def _parsed(self, doc: _Document[D]) -> D:
        return doc.parse(_read(self._dir / doc.name))

    async def _pass_view(
        self, owner: str, profiles: list[str], scopes: list[str], now_ms: int
    ) -> passes.Reading:
        def work() -> passes.Reading:
            with self._locked(exclusive=False):
                reading = passes.read(
                    owner,
                    now_ms,
                    self._parsed(_STARTED),
                    self._parsed(_DELETED),
                    self._parsed(_CLAIMS),
                    self._parsed(_PRESENCE),
                )
                reading.generation = shown_generation(self._dir / CONFIG) or None
                reading.identities = self._stored_identities(profiles)
                return reading

        return await self._call(work)

    def _stored_identities(self, profiles: list[str]) -> dict[str, str]:
        """The identities stored for `profiles`; an unreadable one is left out, as if missing (a
        pass then asks `profile_identity`, which says why)."""
        if self._profile_home is None:
            with contextlib.suppress(CorruptStateError):
                return self._parsed(_IDENTITIES)
            return {}
        found: dict[str, str] = {}
        for name in profiles:
            path = Path(self._profile_home(name)) / PROFILE_ID
            with contextlib.suppress(CorruptStateError, StoreError, OSError):
                if (identity := _PROFILE_ID.parse(_read(path))) is not None:
                    found[name] = identity
        return found

    async def _pass_write(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> tuple[list[RunState], int] | None:
        def work() -> tuple[list[RunState], int] | None:
            with self._locked(exclusive=True):
                runs, forgotten = self._parsed(_RUNS), self._parsed(_FORGOTTEN)
                floor = self._parsed(_REVISION)
                texts = (_RUNS.dump(runs), _FORGOTTEN.dump(forgotten), _REVISION.dump(floor))
                written = passes.write(
                    runs, forgotten, floor, owner, live, now_ms, until, cutoff, forget_before
                )
                if written is None:
                    return None
                new = (_RUNS.dump(runs), _FORGOTTEN.dump(forgotten), _REVISION.dump(written[1]))
                names = (_RUNS.name, _FORGOTTEN.name, _REVISION.name)
                # Staged together, so a crash leaves each file whole (old or new).
                changed = {
                    self._dir / name: text
                    for name, old, text in zip(names, texts, new, strict=True)
                    if text != old
                }
                if changed:
                    _write_all(changed)
                return written

        return await self._call(work)
