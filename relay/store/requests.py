"""The requests a `Store` hands its `Backend`, built from a caller's arguments and checked."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from relay.errors import InvalidInputError
from relay.store import checks
from relay.store.backend import Claim, RunSync
from relay.store.records import OWNER_LIMIT, RunState

# How long the store remembers a session's newest turn after its row is pruned: far past the
# longest any replica may still offer an older one (its outcome memory, 15 min; a lease; a turn
# superseded while it still runs), so an older turn never becomes the session's row again.
TURN_MEMORY_MS = 24 * 3600 * 1000


def sightings(seen: object) -> dict[str, int]:
    """The announceable sightings: trimmed ids of 1..191 chars at safe-integer times; as
    upstream, any other is passed over, and the first of an id wins."""
    fresh: dict[str, int] = {}
    for pair in checks.items("seen", seen):
        raw_id, started_at = _pair(pair, "seen must hold (session_id, started_at) pairs")
        session_id = raw_id.strip() if type(raw_id) is str else ""
        if not session_id or session_id in fresh:
            continue
        with contextlib.suppress(InvalidInputError):
            checks.text("session_id", session_id, 191)
            fresh[session_id] = checks.time_ms("started_at", started_at)
    return fresh


def claim(owner: str, now_ms: int, lease_ms: int, limit: int | None) -> Claim:
    checks.text("owner", owner, OWNER_LIMIT)
    checks.time_ms("now_ms", now_ms)
    until = checks.until("lease", now_ms, checks.safe_int("lease_ms", lease_ms, 1))
    if limit is not None and not 1 <= checks.safe_int("limit", limit) <= checks.MAX_BATCH:
        raise InvalidInputError(f"limit must be an integer in 1..{checks.MAX_BATCH}")
    return Claim(owner, now_ms, until, limit)


def run_sync(
    owner: str, live: Iterable[RunState], now_ms: int, lease_ms: int, retention_ms: int
) -> RunSync:
    lease = claim(owner, now_ms, lease_ms, None)
    runs: dict[str, RunState] = {}
    for run in checks.items("live", live):
        checks.instance("live run", run, RunState)
        if run.owner != owner:
            raise InvalidInputError(f"live run {run.session_id!r} is not owned by {owner!r}")
        if run.session_id in runs:
            raise InvalidInputError(f"live runs name session {run.session_id!r} twice")
        runs[run.session_id] = run
    cutoff = max(now_ms - checks.time_ms("retention_ms", retention_ms), 0)
    forget_before = max(now_ms - max(TURN_MEMORY_MS, retention_ms), 0)
    # Rows are locked in one order by every replica.
    ordered = tuple(runs[sid] for sid in sorted(runs))
    return RunSync(owner, ordered, now_ms, lease.until, cutoff, forget_before)


def names(kind: str, values: Iterable[str], name: str | None = None) -> tuple[str, ...]:
    """Distinct texts of `kind`, in order, from the iterable argument `name` (else `kind`)."""
    listed = checks.items(name or kind, values)
    return tuple(dict.fromkeys(checks.text(kind, value) for value in listed))


def scope_session(pair: object) -> tuple[str, str]:
    profile_id, session_id = _pair(pair, "sent must hold (profile_id, session_id) pairs")
    return checks.text("profile_id", profile_id), checks.text("session_id", session_id)


def _pair(pair: object, refused: str) -> tuple[object, object]:
    if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
        raise InvalidInputError(refused)
    return pair[0], pair[1]
