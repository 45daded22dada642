"""A profile's snapshot rows as a pure function of records: no store, no host, nothing awaited.

`build` chains the steps the way the publisher does, with the session metas of one profile as a
plain mapping and revisions counted from 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from relay.host import ActiveRun, SessionMeta
from relay.protocol import MAX_ID, MAX_SNAPSHOT_STATES, MAX_TITLE, TERMINAL_RETENTION_S, RelayState
from relay.publishing import states
from relay.publishing.states import Terminal

NOW = 1_800_000_000.0
NOW_MS = 1_800_000_000_000


def run(
    session_id: str,
    started_at: float = NOW - 10,
    phase: str = "running",
    *,
    health_only: bool = False,
) -> ActiveRun:
    return ActiveRun(f"stream-{session_id}", session_id, started_at, phase, health_only)


def meta(title: str | None = "Chat", **flags: bool) -> SessionMeta:
    return SessionMeta("default", title, **flags)


def build(
    runs: Sequence[ActiveRun],
    metas: Mapping[str, SessionMeta],
    terminal: Mapping[str, Terminal] | None = None,
    *,
    now: float = NOW,
    eligible: bool = True,
) -> list[RelayState]:
    rows = states.session_runs(runs, states.retained(terminal or {}, now))
    shared = [
        run
        for row in rows
        if row.session_id in metas
        and (run := states.run_state(row, metas[row.session_id], "replica", now))
    ]
    planned = states.drafts(shared, math.floor(now * 1000))
    return states.states(planned, range(1, len(planned) + 1), eligible=eligible)


def phases(built: list[RelayState]) -> dict[str, str]:
    return {state.session_id: state.phase for state in built}


def test_a_live_run_is_running_and_updated_now() -> None:
    """A live run's row is `running`, carries its stream id, and is updated at `now`."""
    (state,) = build([run("s1")], {"s1": meta()})
    assert state == RelayState("s1", "stream-s1", 1, "Chat", "running", NOW_MS, True)


def test_terminal_phase_wins_and_keeps_the_instant_it_ended() -> None:
    """A finished run shows its outcome, even with an approval pending, at the time it ended."""
    ended = Terminal(run("s1"), "completed", NOW - 30)
    (state,) = build([], {"s1": meta(approval_pending=True)}, {"s1": ended})
    assert (state.phase, state.updated_at) == ("completed", NOW_MS - 30_000)


def test_waiting_phases_and_starting() -> None:
    """Approval beats clarification beats starting; a phase ending in `starting` is `starting`."""
    runs = [run("a"), run("c"), run("s", phase="model_starting"), run("both")]
    metas = {
        "a": meta(approval_pending=True),
        "c": meta(clarify_pending=True),
        "s": meta(),
        "both": meta(approval_pending=True, clarify_pending=True),
    }
    assert phases(build(runs, metas)) == {
        "a": "waiting_for_approval",
        "c": "waiting_for_input",
        "s": "starting",
        "both": "waiting_for_approval",
    }


def test_a_finished_turn_beats_its_own_live_copy() -> None:
    """Until the app tears a finished run down, the run is live and finished: finished wins."""
    live = run("s1")
    (state,) = build([live], {"s1": meta()}, {"s1": Terminal(live, "cancelled", NOW - 1)})
    assert (state.phase, state.updated_at) == ("cancelled", NOW_MS - 1000)


def test_the_newest_run_of_a_session_wins_and_hides_its_terminal_one() -> None:
    """Of two runs of one session the later started is shown; a live run hides a finished one."""
    old = run("s1", NOW - 100)
    new = ActiveRun("stream-new", "s1", NOW - 5)
    ended = Terminal(old, "failed", NOW - 50)
    (state,) = build([new, old], {"s1": meta()}, {"s1": ended})
    assert (state.stream_id, state.phase) == ("stream-new", "running")


def test_health_only_and_blank_session_ids_are_skipped() -> None:
    """A health-only waiter and a run without a session id (spaces only) publish nothing."""
    runs = [run("s1"), run("h", health_only=True), ActiveRun("stream-x", "  ", NOW)]
    metas = {"s1": meta(), "h": meta(), "  ": meta(), "": meta()}
    assert [state.session_id for state in build(runs, metas)] == ["s1"]


def test_a_terminal_run_past_its_retention_is_dropped() -> None:
    """A run that ended longer ago than the retention is gone; one just inside it stays."""
    terminal = {
        "old": Terminal(run("old"), "completed", NOW - TERMINAL_RETENTION_S - 1),
        "kept": Terminal(run("kept"), "completed", NOW - TERMINAL_RETENTION_S),
    }
    assert states.retained(terminal, NOW) == {"kept": terminal["kept"]}


def test_sessions_without_meta_are_left_out() -> None:
    """A session the profile's metas do not hold (another profile's, or unreadable) is not shown."""
    assert [s.session_id for s in build([run("mine"), run("other")], {"mine": meta()})] == ["mine"]


def test_at_most_500_rows_keeping_the_most_recent() -> None:
    """Over 500 sessions, the 500 updated most recently are kept, most recent first."""
    count = MAX_SNAPSHOT_STATES + 20
    terminal = {f"s{i}": Terminal(run(f"s{i}"), "completed", NOW - count + i) for i in range(count)}
    built = build([], {sid: meta() for sid in terminal}, terminal)
    assert len(built) == MAX_SNAPSHOT_STATES
    assert [s.session_id for s in built[:2]] == [f"s{count - 1}", f"s{count - 2}"]
    assert built[-1].session_id == "s20"
    assert [s.revision for s in built] == list(range(1, MAX_SNAPSHOT_STATES + 1))


def test_over_long_ids_are_left_out() -> None:
    """A session or stream id over the relay's limit, or an eventId over it, drops that row."""
    longest = "s" * MAX_ID
    long_stream = ActiveRun("t" * (MAX_ID + 1), "stream-too-long", NOW)
    runs = [run("ok"), run("s" * (MAX_ID + 1)), long_stream, run(longest)]
    metas = {r.session_id: meta() for r in runs}
    # `snapshot:<revision>:<sessionId>` of the longest session id is over the limit too.
    assert [s.session_id for s in build(runs, metas)] == ["ok"]


def test_titles_are_capped_and_blank_ones_untitled() -> None:
    """A long title is cut to the relay's limit; a missing or blank one reads `Untitled`."""
    metas = {"long": meta("x" * (MAX_TITLE + 5)), "none": meta(None), "blank": meta("   ")}
    built = {s.session_id: s.title for s in build([run(sid) for sid in metas], metas)}
    assert built == {"long": "x" * MAX_TITLE, "none": "Untitled", "blank": "Untitled"}


def test_eligibility_is_carried_by_every_row() -> None:
    """With a tab present the profile's rows are not alert-eligible; without one they are."""
    runs, metas = [run("a"), run("b")], {"a": meta(), "b": meta()}
    assert {s.alert_eligible for s in build(runs, metas, eligible=False)} == {False}
    assert {s.alert_eligible for s in build(runs, metas, eligible=True)} == {True}


def test_a_run_without_a_stream_id_has_none() -> None:
    """An empty stream id is sent as null."""
    (state,) = build([ActiveRun("", "s1", NOW)], {"s1": meta()})
    assert state.stream_id is None
