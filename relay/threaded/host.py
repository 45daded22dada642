"""`SyncHost`: the `Host` port with plain methods, for a threaded web app, and its async adapter,
which runs each call on a small thread pool of its own, so a slow host call stalls neither the
publisher's other work nor other requests' calls; a call that raises raises as from a `Host`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from relay.host import ActiveRun, AgentSessionRow, Host, IndexRow, SessionMeta

T = TypeVar("T")


class SyncHost(Protocol):
    """The web app, as the relay publisher sees it: `relay.host.Host` with plain methods.

    Every method may be called from a thread of the relay's pool, several at once: guard shared
    state with a lock. `canonical_profile` and `profiles_match` run on the relay's event loop, as
    they do for an async `Host`: they must be quick and must not block.
    """

    def canonical_profile(self, profile: str) -> str:
        """The profile's canonical name (the root profile is `default`); raises if it has none."""
        ...

    def profiles_match(self, row_profile: str | None, profile: str) -> bool:
        """Whether a session or index row of `row_profile` belongs to `profile`."""
        ...

    def profile_available(self, profile: str) -> bool:
        """Whether the profile exists (its home is there); a deleted one publishes nothing."""
        ...

    def active_runs(self) -> Sequence[ActiveRun]:
        """Every run in progress, of every profile."""
        ...

    def session_meta(self, session_id: str) -> SessionMeta | None:
        """The session's metadata, or None when it does not exist."""
        ...

    def session_exists(self, session_id: str) -> bool:
        """Whether the session still has data (a deletion that failed or was interrupted)."""
        ...

    def session_index(self) -> Sequence[IndexRow]:
        """The Web session index, every profile."""
        ...

    def agent_sessions(self, profile: str) -> Sequence[AgentSessionRow]:
        """The profile's messageful Agent sessions."""
        ...


class OffLoopHost(Host):
    """An async `Host` over a `SyncHost`: each I/O call on `pool`, never on the event loop."""

    def __init__(self, host: SyncHost, pool: ThreadPoolExecutor) -> None:
        self.host = host
        self._pool = pool

    def canonical_profile(self, profile: str) -> str:
        return self.host.canonical_profile(profile)

    def profiles_match(self, row_profile: str | None, profile: str) -> bool:
        return self.host.profiles_match(row_profile, profile)

    async def profile_available(self, profile: str) -> bool:
        return await self._run(self.host.profile_available, profile)

    async def active_runs(self) -> Sequence[ActiveRun]:
        return await self._run(self.host.active_runs)

    async def session_meta(self, session_id: str) -> SessionMeta | None:
        return await self._run(self.host.session_meta, session_id)

    async def session_exists(self, session_id: str) -> bool:
        return await self._run(self.host.session_exists, session_id)

    async def session_index(self) -> Sequence[IndexRow]:
        return await self._run(self.host.session_index)

    async def agent_sessions(self, profile: str) -> Sequence[AgentSessionRow]:
        return await self._run(self.host.agent_sessions, profile)

    async def _run(self, call: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)
