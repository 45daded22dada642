"""The run-state methods of `StoreGate`: checks in front of the backend's hooks."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable

from relay.errors import InvalidInputError
from relay.store import checks
from relay.store.checks import read
from relay.store.contract import LeaseWatch, RunStates
from relay.store.records import OWNER_LIMIT, RunState

# How long the store remembers a session's newest turn after its row is pruned: far past the
# longest any replica may still offer an older one (its outcome memory, 15 min; a lease; a turn
# superseded while it still runs), so an older turn never becomes the session's row again.
TURN_MEMORY_MS = 24 * 3600 * 1000


def lease_end(now_ms: int, lease_ms: int) -> int:
    checks.time_ms("now_ms", now_ms)
    return checks.until("lease", now_ms, checks.safe_int("lease_ms", lease_ms, 1))


def sync_arguments(
    owner: str, live: Iterable[RunState], now_ms: int, lease_ms: int, retention_ms: int
) -> tuple[list[RunState], int, int, int]:
    """A sync's arguments checked: (the live runs in session order, the lease's end, the
    retention's cutoff, when remembered turns are forgotten)."""
    checks.text("owner", owner, OWNER_LIMIT)
    runs: dict[str, RunState] = {}
    for run in checks.items("live", live):
        checks.instance("live run", run, RunState)
        if run.owner != owner:
            raise InvalidInputError(f"live run {run.session_id!r} is not owned by {owner!r}")
        if run.session_id in runs:
            raise InvalidInputError(f"live runs name session {run.session_id!r} twice")
        runs[run.session_id] = run
    until = lease_end(now_ms, lease_ms)
    cutoff = max(now_ms - checks.time_ms("retention_ms", retention_ms), 0)
    forget_before = max(now_ms - max(TURN_MEMORY_MS, retention_ms), 0)
    # Rows are locked in one order by every replica.
    return [runs[sid] for sid in sorted(runs)], until, cutoff, forget_before


class RunGate(RunStates, LeaseWatch):
    """Checks what goes into the run-state hooks; records check what comes out."""

    async def save_run(self, run: RunState, now_ms: int, lease_ms: int) -> bool:
        checks.instance("run", run, RunState)
        return await self._save_run(run, lease_end(now_ms, lease_ms))

    async def sync_runs(
        self,
        owner: str,
        live: Iterable[RunState],
        now_ms: int,
        *,
        lease_ms: int,
        retention_ms: int,
    ) -> list[RunState]:
        ordered, until, cutoff, forget_before = sync_arguments(
            owner, live, now_ms, lease_ms, retention_ms
        )
        return await read(
            "run", self._sync_runs(owner, ordered, now_ms, until, cutoff, forget_before)
        )

    async def keep_alive(self, owner: str, now_ms: int, lease_ms: int) -> int | None:
        checks.text("owner", owner, OWNER_LIMIT)
        expiry = await self._keep_alive(owner, now_ms, lease_end(now_ms, lease_ms))
        if expiry is None:
            return None
        return await read("lease", _checked_end(expiry))

    async def release_runs(self, owner: str) -> None:
        await self._release_runs(checks.text("owner", owner, OWNER_LIMIT))

    async def run_states(self) -> list[RunState]:
        return await read("run", self._run_states())

    @abstractmethod
    async def _save_run(self, run: RunState, until: int) -> bool: ...

    @abstractmethod
    async def _sync_runs(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> list[RunState]:
        """Save the owner's live rows, end those it no longer hosts, renew, take over, prune
        (remembering each pruned row's turn until `forget_before`), mark sending; owned rows."""

    @abstractmethod
    async def _keep_alive(self, owner: str, now_ms: int, until: int) -> int | None: ...

    @abstractmethod
    async def _release_runs(self, owner: str) -> None: ...

    @abstractmethod
    async def _run_states(self) -> list[RunState]: ...


async def _checked_end(expiry: object) -> int:
    return checks.time_ms("lease end", expiry)
