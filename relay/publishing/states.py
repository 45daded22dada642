"""A profile's snapshot rows, built from records alone (testable without I/O): the replica
hosting a run turns its records into the `RunState` every replica shares; the replica owning a
row turns the rows (with presence and revisions) into snapshot states."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from relay.errors import InvalidInputError
from relay.host import ActiveRun, SessionMeta
from relay.protocol import (
    MAX_ID,
    MAX_SNAPSHOT_STATES,
    TERMINAL_PHASES,
    TERMINAL_RETENTION_S,
    RelayState,
    capped_title,
)
from relay.store.records import RunState


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


def retained(terminal: Mapping[str, Terminal], now: float) -> dict[str, Terminal]:
    """The terminal runs still within their retention at `now`."""
    cutoff = now - TERMINAL_RETENTION_S
    return {sid: t for sid, t in terminal.items() if t.terminal_at >= cutoff}


def session_runs(runs: Iterable[ActiveRun], terminal: Mapping[str, Terminal]) -> list[SessionRun]:
    """One run per session: its newest turn, live or finished; a finished turn beats its live copy.
    Health-only waiters and runs without a session id publish nothing."""
    latest: dict[str, SessionRun] = {}
    for run in runs:
        sid = run.session_id.strip()
        if run.health_only or not sid:
            continue
        if sid not in latest or run.started_at > latest[sid].run.started_at:
            latest[sid] = SessionRun(sid, run)
    for sid, ended in terminal.items():
        shown = latest.get(sid)
        if shown is None or ended.run.started_at >= shown.run.started_at:
            latest[sid] = SessionRun(sid, ended.run, ended)
    return list(latest.values())


def run_state(row: SessionRun, meta: SessionMeta, owner: str, now: float) -> RunState | None:
    """What the replica hosting the run tells the others about it; None if the relay can't show it.
    A finished run keeps the instant it ended, so a viewer of that turn covers it."""
    # The wire phase: a terminal outcome, else what the session waits on, else the run's own.
    phase = row.terminal.phase if row.terminal else "running"
    if phase not in TERMINAL_PHASES and meta.approval_pending:
        phase = "waiting_for_approval"
    if phase == "running" and meta.clarify_pending:
        phase = "waiting_for_input"
    if phase == "running" and row.run.phase.endswith("starting"):
        phase = "starting"
    ended = row.terminal.terminal_at if row.terminal else now
    try:
        return RunState(
            row.session_id,
            row.run.stream_id or None,
            meta.profile,
            capped_title(meta.title),
            phase,
            _ms(row.run.started_at),
            _ms(ended),
            owner,
        )
    except InvalidInputError:  # an id past the relay's limits, or a time that is no time
        return None


def same_turn(offered: RunState | None, row: SessionRun) -> RunState | None:
    """`offered` again if it was `row`'s turn (with the outcome `row` now has), else None: for a
    session whose metadata cannot be read this pass, its turn still hosted."""
    try:
        started = _ms(row.run.started_at)
        ended = _ms(row.terminal.terminal_at) if row.terminal else None
    except InvalidInputError:
        return None
    if offered is None or (offered.started_at, offered.stream_id) != (
        started,
        row.run.stream_id or None,
    ):
        return None
    if row.terminal is None or ended is None:
        return offered
    return replace(offered, phase=row.terminal.phase, updated_at=ended)


def drafts(runs: Iterable[RunState], now_ms: int) -> list[RelayState]:
    """The rows of one profile's sessions, most recent first, as many as the relay takes, each
    with revision 0 until `states` gives it one; a live run as of now, a finished one as of its
    end."""
    built = [
        RelayState(
            r.session_id, r.stream_id, 0, r.title, r.phase, r.updated_at if r.terminal else now_ms
        )
        for r in runs
    ]
    # The relay takes 500 rows at most: keep the most recent (a stable sort keeps ties in order).
    built.sort(key=lambda draft: -draft.updated_at)
    return built[:MAX_SNAPSHOT_STATES]


def states(
    planned: Sequence[RelayState], revisions: Sequence[int], *, eligible: bool
) -> list[RelayState]:
    """The drafts with their revisions; a row whose eventId the relay would refuse is left out."""
    built = [
        replace(draft, revision=revision, alert_eligible=eligible)
        for draft, revision in zip(planned, revisions, strict=True)
    ]
    # An eventId over the relay's limit would fail the whole snapshot.
    return [state for state in built if len(state.event_id) <= MAX_ID]


def _ms(seconds: float) -> int:
    """Unix seconds as whole milliseconds; `InvalidInputError` for what is not a time."""
    try:
        return math.floor(float(seconds) * 1000)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError("not a time") from None
