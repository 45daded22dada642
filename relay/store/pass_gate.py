"""The publishing-pass methods of `StoreGate`: checks in front of the backend's hooks."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable

from relay.errors import CorruptStateError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import checks
from relay.store.checks import read
from relay.store.contract import Passes
from relay.store.records import OWNER_LIMIT, PassRows, PassView, RunState
from relay.store.rules.passes import Reading
from relay.store.run_gate import sync_arguments

PAST_THE_CAP = "the revision counter would pass 2^53-1; nothing was handed out"


def _names(kind: str, values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(checks.text(kind, value) for value in checks.items(kind, values)))


class PassGate(Passes):
    """Checks what goes into the pass hooks; narrows and checks what comes out."""

    async def pass_view(
        self, owner: str, profiles: Iterable[str], scopes: Iterable[str], now_ms: int
    ) -> PassView:
        checks.text("owner", owner, OWNER_LIMIT)
        names, scope_ids = _names("profile", profiles), _names("profile_id", scopes)
        checks.time_ms("now_ms", now_ms)
        return await read("pass view", self._view(owner, names, scope_ids, now_ms))

    async def _view(
        self, owner: str, profiles: list[str], scopes: list[str], now_ms: int
    ) -> PassView:
        got = await self._pass_view(owner, profiles, scopes, now_ms)
        # An invalid stored identity is no identity, as a pass reads it: the profile is not
        # published (`profile_identity` would raise for it).
        identities = {p: got.identities.get(p) for p in profiles}
        return PassView(
            got.generation,
            {p: i if checks.is_identity(i) else None for p, i in identities.items()},
            {p: p in got.active for p in profiles},
            got.deleted,
            frozenset(s for s in scopes if s in got.unsent),
            frozenset(s for s in scopes if s not in got.tracked),
            got.store_ms,
        )

    async def pass_write(
        self,
        owner: str,
        live: Iterable[RunState],
        now_ms: int,
        *,
        lease_ms: int,
        retention_ms: int,
    ) -> PassRows:
        ordered, until, cutoff, forget_before = sync_arguments(
            owner, live, now_ms, lease_ms, retention_ms
        )
        return await read("run", self._write(owner, ordered, now_ms, until, cutoff, forget_before))

    async def _write(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> PassRows:
        written = await self._pass_write(owner, live, now_ms, until, cutoff, forget_before)
        if written is None:
            raise CorruptStateError(PAST_THE_CAP)
        rows, last = written
        if not rows:
            return PassRows((), range(0))
        if type(last) is not int or not len(rows) <= last <= MAX_SAFE_INTEGER:
            raise CorruptStateError(f"stored revision floor {last!r} is invalid")
        return PassRows(tuple(rows), range(last - len(rows) + 1, last + 1))

    @abstractmethod
    async def _pass_view(
        self, owner: str, profiles: list[str], scopes: list[str], now_ms: int
    ) -> Reading:
        """What the store holds for a pass's view; it may report more than was asked."""

    @abstractmethod
    async def _pass_write(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> tuple[list[RunState], int] | None:
        """`_sync_runs`, then raise the revision floor as `_allocate_revisions(len(rows))` would
        (not at all for no rows): (the rows, the floor after). None when that would pass 2^53-1,
        and then nothing changes."""
