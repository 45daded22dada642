"""The `Host` port: what the relay needs to know about the web app that embeds it.

The web app implements `Host`; `relay.testing.MemoryHost` is an in-memory one for tests and demos.
Times are Unix seconds (floats), as the web app keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A turn in progress: `phase` is the app's own (a phase ending in `starting` is starting)."""

    stream_id: str
    session_id: str
    started_at: float
    phase: str = "running"
    # A waiter that only checks health publishes nothing.
    health_only: bool = False


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What a snapshot shows of a session, and whether it waits on the user."""

    profile: str | None
    title: str | None
    approval_pending: bool = False
    clarify_pending: bool = False


@dataclass(frozen=True, slots=True)
class IndexRow:
    """A row of the Web session index."""

    session_id: str
    profile: str | None
    message_count: int
    created_at: float


@dataclass(frozen=True, slots=True)
class AgentSessionRow:
    """A messageful session of the Agent's own store; a compressed chat keeps its lineage root."""

    id: str
    started_at: float
    lineage_root_id: str | None = None


class Host(Protocol):
    """The web app, as the relay publisher sees it."""

    def canonical_profile(self, profile: str) -> str:
        """The profile's canonical name (the root profile is `default`); raises if it has none."""

    def profiles_match(self, row_profile: str | None, profile: str) -> bool:
        """Whether a session or index row of `row_profile` belongs to `profile`."""

    async def profile_available(self, profile: str) -> bool:
        """Whether the profile exists (its home is there); a deleted one publishes nothing."""

    async def active_runs(self) -> Sequence[ActiveRun]:
        """Every run in progress, of every profile."""

    async def session_meta(self, session_id: str) -> SessionMeta | None:
        """The session's metadata, or None when it does not exist."""

    async def session_exists(self, session_id: str) -> bool:
        """Whether the session still has data (a deletion that failed or was interrupted)."""

    async def session_index(self) -> Sequence[IndexRow]:
        """The Web session index, every profile."""

    async def agent_sessions(self, profile: str) -> Sequence[AgentSessionRow]:
        """The profile's messageful Agent sessions."""
