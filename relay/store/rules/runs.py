"""The rules of the run-state table, on a plain dict of rows (`relay.store.sql.runs` in SQL)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from relay.store.backend import RunSync
from relay.store.records import RunState, StartedEntry

Runs = dict[str, RunState]  # by session id
Turn = tuple[int, str]  # (started_at, stream id or ""): how a session's turns are ordered
# By session id: the newest turn of a session whose row was pruned, and when it was.
Forgotten = dict[str, tuple[Turn, int]]


def turn(run: RunState) -> Turn:
    return run.started_at, run.stream_id or ""


def save(runs: Runs, forgotten: Forgotten, run: RunState, until: int) -> bool:
    """Store `run` unless its session has a newer turn, or this turn has ended already (but for
    the true phase of a turn a takeover ended as failed, from the replica it was taken from:
    `RunState.taken_back`).

    A session whose row was pruned takes only a turn newer than the one pruned.
    """
    stored = runs.get(run.session_id)
    if stored is None:
        gone = forgotten.get(run.session_id)
        if gone is not None and gone[0] >= turn(run):
            return False
    elif turn(stored) > turn(run) or (
        turn(stored) == turn(run) and stored.terminal and not stored.taken_back(run)
    ):
        return False
    # Whoever is sending the row goes on sending it: that is not part of the turn.
    sending = (stored.sending_by, stored.sending_until) if stored else (None, 0)
    runs[run.session_id] = replace(
        run, lease_until=until, sending_by=sending[0], sending_until=sending[1]
    )
    return True


def renew(runs: Runs, owner: str, until: int) -> None:
    for sid, run in runs.items():
        if run.owner == owner and run.lease_until < until:
            runs[sid] = replace(run, lease_until=until)


def sync(runs: Runs, forgotten: Forgotten, request: RunSync) -> list[RunState]:
    """A pass's run sync (`pass_write` but its revisions), in the order the SQL store does it."""
    owner, now_ms, until = request.owner, request.now_ms, request.until
    # The owner's live rows wait to be confirmed by what it hosts now (lease 0 marks them).
    for sid, run in runs.items():
        if run.owner == owner and not run.terminal:
            runs[sid] = replace(run, lease_until=0)
    for run in request.live:
        save(runs, forgotten, replace(run, owner=owner), until)
    for sid, run in runs.items():
        if run.owner == owner and not run.terminal and run.lease_until == 0:
            # Its host dropped the newest turn without an outcome: it ended, as failed.
            runs[sid] = replace(run, phase="failed", updated_at=now_ms, lease_until=until)
    renew(runs, owner, until)
    for sid, run in runs.items():
        if run.owner != owner and run.lease_until <= now_ms:
            # A live turn ends as failed, remembering whose it was (`RunState.taken_back`).
            ended = (
                run
                if run.terminal
                else replace(run, phase="failed", updated_at=now_ms, taken_from=run.owner)
            )
            runs[sid] = replace(ended, owner=owner, lease_until=until)
    prune(runs, forgotten, now_ms, request.cutoff, request.forget_before)
    for sid, run in runs.items():
        if run.owner == owner and not run.sent_elsewhere(owner, now_ms):
            runs[sid] = replace(run, sending_by=owner, sending_until=until)
    return sorted(
        (run for run in runs.values() if run.owner == owner),
        key=lambda run: (run.started_at, run.session_id),
    )


def prune(runs: Runs, forgotten: Forgotten, now_ms: int, cutoff: int, forget_before: int) -> None:
    """Forget rows that ended before `cutoff`, remembering each one's turn until `forget_before`
    passes the time it was pruned."""
    for sid, run in list(runs.items()):
        if run.terminal and run.updated_at < cutoff:
            gone = forgotten.get(sid)
            if gone is None or turn(run) >= gone[0]:
                forgotten[sid] = (turn(run), now_ms)
            del runs[sid]
    for sid, (_, at) in list(forgotten.items()):
        if at < forget_before:
            del forgotten[sid]


def next_lease_end(
    owner: str,
    since_ms: int,
    runs: Runs,
    started: Iterable[StartedEntry],
    claims: Iterable[tuple[str, int]],
) -> int | None:
    """When the first lease another owner holds ends after `since_ms` (`Claim.watched_since`):
    a run, an unsent announcement's claim, or a deletion's claim (`(owner, until)` pairs)."""
    ends = [run.lease_until for run in runs.values() if run.owner != owner]
    ends += [
        e.claimed_until
        for e in started
        if not e.sent and e.claimed_by not in (None, owner) and e.claimed_until
    ]
    ends += [until for holder, until in claims if holder != owner]
    return min((end for end in ends if end > since_ms), default=None)


def retire(runs: Runs, owner: str, now_ms: int) -> None:
    """A stopping owner's finished rows: their leases end at `now_ms` (a live row keeps its)."""
    for sid, run in runs.items():
        if run.owner == owner and run.terminal and run.lease_until > now_ms:
            runs[sid] = replace(run, lease_until=now_ms)


def release(runs: Runs, owner: str) -> None:
    for sid, run in runs.items():
        if run.sending_by == owner:
            runs[sid] = replace(run, sending_by=None, sending_until=0)
