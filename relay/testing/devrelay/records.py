"""What the dev relay keeps: keys, grants with their rows and completions, events received.

The lifecycle rules of rows come from the relay's `publishers.ts` and `completions.ts`:
Non-terminal rows are 3-minute leases and terminal rows last 15 minutes; a lower revision is
ignored, an equal one refreshes the lease, a higher one replaces the row; rows missing from a
snapshot are not tombstoned, they expire. A terminal row also records a completion, which outlives
the row until the app or a `viewed` acknowledgement clears it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from relay.protocol import TERMINAL_PHASES
from relay.testing.devrelay.validation import StartedInput, StateInput

LEASE_MS = 3 * 60_000
TERMINAL_MS = 15 * 60_000


def wire(record: Any) -> dict[str, Any]:
    """A record dataclass as camelCase JSON, the way the relay names its fields."""
    return {re.sub("_(.)", lambda m: m[1].upper(), k): v for k, v in asdict(record).items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow(StateInput):
    """A session's current state as one relay user sees it: the state that wrote it (its
    `alert_eligible` as its run inherits it), and what the relay keeps beside it."""

    user_id: str
    publisher_id: str
    profile_id: str
    run_key: str
    expires_at: int
    terminal_expires_at: int | None
    received_at: int
    acknowledged: bool | None = None  # terminal rows only: their completion was acknowledged


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished run, kept until acknowledged even after its row is replaced or expires."""

    session_id: str
    run_key: str
    revision: int
    phase: str
    title: str
    updated_at: int | float
    deep_link: str
    acknowledged: bool = False


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A registered public key; activation and revocation times are relay milliseconds."""

    key_id: str
    publisher_id: str
    owner_user_id: str
    public_key: str  # raw Ed25519 key, base64url, as registered
    created_at: int
    activated_at: int | None = None
    revoked_at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartedEvent(StartedInput):
    """A session-started announcement as the relay accepted it."""

    received_at: int


@dataclass(frozen=True, slots=True)
class ViewedAck:
    publisher_id: str
    profile_id: str
    session_id: str
    through: int
    acknowledged: int
    received_at: int


@dataclass(slots=True)
class Grant:
    """One relay user's grant for a publisher: the profile scope it sees, and that scope's rows."""

    user_id: str
    owner_user_id: str
    publisher_id: str
    profile_id: str
    rows: dict[str, SessionRow] = field(default_factory=dict)
    completions: dict[tuple[str, str], Completion] = field(default_factory=dict)
    # For tests of many publishers: states that arrived with a lower revision than the row's,
    # and every (session, stream, phase) a higher revision wrote, in order.
    stale: int = 0
    history: list[tuple[str, str | None, str]] = field(default_factory=list)

    def clear(self) -> None:
        self.rows.clear()
        self.completions.clear()

    def current(self, now: int, *, include_expired: bool = False) -> list[SessionRow]:
        """The rows, each with its completion's acknowledgement, unexpired unless asked."""
        rows = []
        for row in self.rows.values():
            if not include_expired and row.expires_at <= now:
                continue
            completion = self.completions.get((row.session_id, row.run_key))
            if row.phase in TERMINAL_PHASES and completion is not None:
                rows.append(replace(row, acknowledged=completion.acknowledged))
            else:
                rows.append(row)
        return rows

    def apply(self, state: StateInput, now: int) -> None:
        """Lower revisions are ignored, an equal one refreshes the lease, a higher one replaces."""
        current = self.rows.get(state.session_id)
        if current is not None and state.revision < current.revision:
            self.stale += 1
            return
        if current is not None and state.revision == current.revision:
            live = current.phase not in TERMINAL_PHASES
            expires_at = now + LEASE_MS if live else current.expires_at
            self.rows[state.session_id] = replace(current, expires_at=expires_at, received_at=now)
            return
        terminal = state.phase in TERMINAL_PHASES
        run = (state.phase, state.stream_id)
        same_run = current is not None and (current.phase, current.stream_id) == run
        # Ineligibility belongs to the transition that carried it: same-phase updates inherit it.
        inherit = current is not None and same_run and current.alert_eligible is False
        alert_eligible = False if inherit else state.alert_eligible
        # A run is its stream; without one, a session's lifecycle groups its states into runs.
        if state.stream_id is not None:
            run_key = state.stream_id
        elif current is not None and not (current.phase in TERMINAL_PHASES and not terminal):
            run_key = current.run_key
        else:
            run_key = state.event_id
        if current is not None and same_run and terminal and state.stream_id is not None:
            # A repeated terminal phase of the same stream keeps its original 15 minutes.
            expires_at, terminal_at = current.expires_at, current.terminal_expires_at
        elif terminal:
            expires_at = terminal_at = now + TERMINAL_MS
        else:
            expires_at, terminal_at = now + LEASE_MS, None
        row = SessionRow(
            **asdict(replace(state, alert_eligible=alert_eligible)), user_id=self.user_id,
            publisher_id=self.publisher_id, profile_id=self.profile_id, run_key=run_key,
            expires_at=expires_at, terminal_expires_at=terminal_at, received_at=now,
        )  # fmt: skip
        if terminal:
            self._record_completion(row)
        self.rows[state.session_id] = row
        self.history.append((state.session_id, state.stream_id, state.phase))

    def _record_completion(self, row: SessionRow) -> None:
        key = (row.session_id, row.run_key)
        existing = self.completions.get(key)
        if existing is None:
            self.completions[key] = Completion(
                row.session_id, row.run_key, row.revision, row.phase, row.title, row.updated_at,
                row.deep_link,
            )  # fmt: skip
        elif row.revision > existing.revision:
            # A heartbeat advances the revision without becoming a new outcome; a corrected
            # result keeps the run's identity and its acknowledgement.
            outcome = (row.phase, row.title, row.deep_link)
            same = outcome == (existing.phase, existing.title, existing.deep_link)
            self.completions[key] = replace(
                existing,
                revision=row.revision,
                phase=row.phase,
                title=row.title,
                updated_at=existing.updated_at if same else row.updated_at,
                deep_link=row.deep_link,
            )

    def acknowledge(self, session_id: str, through: int) -> int:
        """Acknowledge the session's pending completions with `updatedAt <= through`; how many."""
        pending = [
            key
            for key, c in self.completions.items()
            if c.session_id == session_id and not c.acknowledged and c.updated_at <= through
        ]
        for key in pending:
            self.completions[key] = replace(self.completions[key], acknowledged=True)
        return len(pending)
