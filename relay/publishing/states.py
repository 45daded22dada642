"""A profile's snapshot rows, built from records alone: no store, no host, nothing awaited.

The publisher gathers the records (runs, retained terminal runs, session metas, presence,
revisions); what each row says about them is decided here, so it can be tested without I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from relay.host import ActiveRun, SessionMeta
from relay.protocol import (
    MAX_ID,
    MAX_SNAPSHOT_STATES,
    TERMINAL_PHASES,
    TERMINAL_RETENTION_S,
    RelayState,
    capped_title,
)


@dataclass(frozen=True, slots=True)
class Terminal:
    """A finished run, kept so its outcome outlives the run's teardown."""

    run: ActiveRun
    phase: str
    terminal_at: float


@dataclass(frozen=True, slots=True)
class SessionRun:
    """The run a session's row shows: its newest live run, else its retained terminal one."""

    session_id: str
    run: ActiveRun
    terminal: Terminal | None = None


@dataclass(frozen=True, slots=True)
class Draft:
    """A row before its revision is allocated."""

    session_id: str
    stream_id: str | None
    title: str
    phase: str
    updated_at: int


def retained(terminal: Mapping[str, Terminal], now: float) -> dict[str, Terminal]:
    """The terminal runs still within their retention at `now`."""
    cutoff = now - TERMINAL_RETENTION_S
    return {sid: t for sid, t in terminal.items() if t.terminal_at >= cutoff}


def session_runs(runs: Iterable[ActiveRun], terminal: Mapping[str, Terminal]) -> list[SessionRun]:
    """One run per session: the newest live one wins, a terminal one only for a session with none.

    Health-only waiters and runs without a session id publish nothing.
    """
    latest: dict[str, ActiveRun] = {}
    for run in runs:
        sid = run.session_id.strip()
        if run.health_only or not sid:
            continue
        if sid not in latest or run.started_at > latest[sid].started_at:
            latest[sid] = run
    rows = [SessionRun(sid, run) for sid, run in latest.items()]
    rows += [SessionRun(sid, t.run, t) for sid, t in terminal.items() if sid not in latest]
    return rows


def phase_of(row: SessionRun, meta: SessionMeta) -> str:
    """The wire phase: a terminal outcome, else what the session waits on, else the run's own."""
    phase = row.terminal.phase if row.terminal else "running"
    if phase not in TERMINAL_PHASES and meta.approval_pending:
        phase = "waiting_for_approval"
    if phase == "running" and meta.clarify_pending:
        phase = "waiting_for_input"
    if phase == "running" and row.run.phase.endswith("starting"):
        phase = "starting"
    return phase


def drafts(rows: Iterable[tuple[SessionRun, SessionMeta]], now: float) -> list[Draft]:
    """The rows of one profile's sessions, most recent first, as many as the relay takes."""
    built: list[Draft] = []
    for row, meta in rows:
        # A finished run keeps the instant it ended, so a viewer of that turn covers it.
        updated_at = math.floor((row.terminal.terminal_at if row.terminal else now) * 1000)
        title = capped_title(meta.title if meta.title and meta.title.strip() else None)
        stream = row.run.stream_id or None
        if len(row.session_id) <= MAX_ID and (stream is None or len(stream) <= MAX_ID):
            built.append(Draft(row.session_id, stream, title, phase_of(row, meta), updated_at))
    # The relay takes 500 rows at most: keep the most recent (a stable sort keeps ties in order).
    built.sort(key=lambda draft: -draft.updated_at)
    return built[:MAX_SNAPSHOT_STATES]


def states(
    planned: Sequence[Draft], revisions: Sequence[int], *, eligible: bool
) -> list[RelayState]:
    """The drafts with their revisions; a row whose eventId the relay would refuse is left out."""
    built = [
        RelayState(d.session_id, d.stream_id, revision, d.title, d.phase, d.updated_at, eligible)
        for d, revision in zip(planned, revisions, strict=True)
    ]
    # An eventId over the relay's limit would fail the whole snapshot.
    return [state for state in built if len(state.event_id) <= MAX_ID]
