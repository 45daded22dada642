"""`MemoryHost`: a web app held in memory, for tests, demos and users' own tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from relay.host import ActiveRun, AgentSessionRow, Host, IndexRow, SessionMeta


@dataclass(slots=True)
class MemorySession:
    """A session as the app keeps it."""

    id: str
    profile: str
    title: str
    created_at: float
    message_count: int = 1
    approval_pending: bool = False
    clarify_pending: bool = False


class MemoryHost(Host):
    """Profiles, sessions and runs in dicts; drive it with the methods that are not `Host`'s."""

    def __init__(
        self, profiles: Iterable[str] = ("default",), clock: Callable[[], float] = time.time
    ) -> None:
        self.profiles = set(profiles)
        self.sessions: dict[str, MemorySession] = {}
        self.runs: dict[str, ActiveRun] = {}
        self.agent_rows: dict[str, list[AgentSessionRow]] = {}
        self._clock = clock

    def create_session(
        self,
        session_id: str,
        profile: str = "default",
        title: str = "Untitled",
        messages: int = 1,
        *,
        created_at: float | None = None,
    ) -> MemorySession:
        """A session created now, or at `created_at` (Unix seconds)."""
        at = self._clock() if created_at is None else created_at
        session = MemorySession(session_id, profile, title, at, messages)
        self.sessions[session_id] = session
        return session

    def start_run(
        self,
        session_id: str,
        stream_id: str | None = None,
        phase: str = "running",
        *,
        started_at: float | None = None,
    ) -> ActiveRun:
        """A turn started now, or at `started_at` (Unix seconds)."""
        at = self._clock() if started_at is None else started_at
        run = ActiveRun(stream_id or f"stream-{session_id}", session_id, at, phase)
        self.runs[run.stream_id] = run
        return run

    def set_run_phase(self, stream_id: str, phase: str) -> None:
        self.runs[stream_id] = replace(self.runs[stream_id], phase=phase)

    def end_run(self, stream_id: str) -> None:
        self.runs.pop(stream_id, None)

    def set_pending(
        self, session_id: str, *, approval: bool = False, clarify: bool = False
    ) -> None:
        self.sessions[session_id].approval_pending = approval
        self.sessions[session_id].clarify_pending = clarify

    def delete_session(self, session_id: str) -> MemorySession:
        return self.sessions.pop(session_id)

    def add_agent_session(
        self, profile: str, session_id: str, started_at: float, lineage_root_id: str | None = None
    ) -> None:
        row = AgentSessionRow(session_id, started_at, lineage_root_id)
        self.agent_rows.setdefault(profile, []).append(row)

    def canonical_profile(self, profile: str) -> str:
        name = profile.strip()
        if not name:
            raise LookupError("empty profile name")
        return name

    def profiles_match(self, row_profile: str | None, profile: str) -> bool:
        return (row_profile or "default") == profile

    async def profile_available(self, profile: str) -> bool:
        return profile in self.profiles

    async def active_runs(self) -> Sequence[ActiveRun]:
        return list(self.runs.values())

    async def session_meta(self, session_id: str) -> SessionMeta | None:
        session = self.sessions.get(session_id)
        if session is None:
            return None
        return SessionMeta(
            session.profile, session.title, session.approval_pending, session.clarify_pending
        )

    async def session_exists(self, session_id: str) -> bool:
        return session_id in self.sessions

    async def session_index(self) -> Sequence[IndexRow]:
        return [
            IndexRow(s.id, s.profile, s.message_count, s.created_at) for s in self.sessions.values()
        ]

    async def agent_sessions(self, profile: str) -> Sequence[AgentSessionRow]:
        return list(self.agent_rows.get(profile, ()))
