"""The web app both examples serve: sessions and turns held in memory, as Hermes WebUI holds them.

`Sessions` is the app's state and its `relay.threaded.SyncHost`; `Hermes` is what its handlers
do, each action followed by the relay call the README asks for. Request threads and the relay's
host threads share `Sessions`, so one lock guards it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.host import ActiveRun, AgentSessionRow, IndexRow, SessionMeta
from relay.routes import Caller
from relay.threaded import SyncHost, ThreadedRelayService


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    profile: str
    title: str
    created_at: float


class Sessions(SyncHost):
    """Profiles, sessions and runs of this process; the relay reads them through `SyncHost`."""

    def __init__(self, profiles: Sequence[str] = ("default",)) -> None:
        self._lock = threading.Lock()
        self.profiles = set(profiles)
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, ActiveRun] = {}

    def create(
        self, session_id: str, profile: str, title: str, created_at: float | None = None
    ) -> Session:
        session = Session(session_id, profile, title, created_at or time.time())
        with self._lock:
            self.sessions[session_id] = session
        return session

    def start_run(self, session_id: str, stream_id: str) -> ActiveRun:
        run = ActiveRun(stream_id, session_id, time.time())
        with self._lock:
            if session_id not in self.sessions:
                raise KeyError(session_id)
            self.runs[stream_id] = run
        return run

    def end_run(self, stream_id: str) -> None:
        with self._lock:
            self.runs.pop(stream_id, None)

    def delete(self, session_id: str) -> Session:
        with self._lock:
            for stream_id, run in list(self.runs.items()):
                if run.session_id == session_id:
                    del self.runs[stream_id]
            return self.sessions.pop(session_id)

    # ── SyncHost ──────────────────────────────────────────────────────────────

    def canonical_profile(self, profile: str) -> str:
        name = profile.strip()
        if not name:
            raise LookupError("empty profile name")
        return name

    def profiles_match(self, row_profile: str | None, profile: str) -> bool:
        return (row_profile or "default") == profile

    def profile_available(self, profile: str) -> bool:
        return profile in self.profiles

    def active_runs(self) -> Sequence[ActiveRun]:
        with self._lock:
            return list(self.runs.values())

    def session_meta(self, session_id: str) -> SessionMeta | None:
        with self._lock:
            session = self.sessions.get(session_id)
        return None if session is None else SessionMeta(session.profile, session.title)

    def session_exists(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self.sessions

    def session_index(self) -> Sequence[IndexRow]:
        with self._lock:
            return [IndexRow(s.id, s.profile, 1, s.created_at) for s in self.sessions.values()]

    def agent_sessions(self, profile: str) -> Sequence[AgentSessionRow]:
        return []


class NotFound(LookupError):
    """No such session here."""


class Hermes:
    """The app's own actions; each tells the relay what changed."""

    def __init__(
        self, relay: ThreadedRelayService, sessions: Sessions, tokens: Mapping[str, Caller]
    ) -> None:
        self.relay = relay
        self.sessions = sessions
        self.tokens = tokens

    def caller(self, authorization: str | None) -> Caller | None:
        """The app's auth: a bearer token per user (a real app reads its login session)."""
        token = (authorization or "").removeprefix("Bearer ")
        return self.tokens.get(token)

    def create(self, caller: Caller, body: Mapping[str, Any]) -> dict[str, Any]:
        session = self.sessions.create(str(body["id"]), caller.profile, str(body["title"]))
        self.relay.changed()
        return {"ok": True, "id": session.id, "worker": os.getpid()}

    def start_turn(self, session_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            self.sessions.start_run(session_id, str(body["stream_id"]))
        except KeyError:
            raise NotFound(session_id) from None
        self.relay.changed()
        return {"ok": True, "worker": os.getpid()}

    def end_turn(self, session_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        stream_id, phase = str(body["stream_id"]), str(body.get("phase", "completed"))
        if stream_id not in self.sessions.runs:
            raise NotFound(session_id)
        self.relay.note_terminal(stream_id, phase)  # before the run is gone
        self.sessions.end_run(stream_id)
        self.relay.changed()
        return {"ok": True, "worker": os.getpid()}

    def delete(self, session_id: str) -> dict[str, Any]:
        try:
            session = self.sessions.delete(session_id)
        except KeyError:
            raise NotFound(session_id) from None
        self.relay.clear_deleted(session_id, session.profile)  # before reporting success
        return {"ok": True, "worker": os.getpid()}


def relay_from_env(sessions: Sessions) -> ThreadedRelayService:
    """The facade as a deployment configures it: the store from `TALARIA_RELAY_STORE_URL`, the
    relay from `TALARIA_RELAY_URL`; `EXAMPLE_LOOPBACK_RELAY=1` allows a plain-HTTP dev relay."""
    return ThreadedRelayService(
        None, sessions, allow_insecure_loopback=os.environ.get("EXAMPLE_LOOPBACK_RELAY") == "1"
    )


TOKENS = {"owner-token": Caller("default", operator=True)}
