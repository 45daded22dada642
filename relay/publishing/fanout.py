"""Profiles side by side: a pass's snapshot PUTs in flight together, at most
`SNAPSHOT_CONCURRENCY` at once (not one replica opening dozens of connections), earliest profile
first; upstream sends them one after another, so its last profile moves P round trips late.

Upstream's isolation is kept: each profile's failure is caught where it happens and returned, so
it neither cancels nor delays another PUT; the pass judges the failures once all were attempted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from relay.errors import RelayHttpError

# Snapshot PUTs of one pass in flight at once: P = 10 profiles take two relay round trips.
SNAPSHOT_CONCURRENCY = 8


async def attempt_all(
    attempts: Sequence[Callable[[], Awaitable[None]]], limit: int = SNAPSHOT_CONCURRENCY
) -> list[Exception | None]:
    """Await every attempt, at most `limit` at once, in order of starting; each one's failure
    (or None), in the order given. Only a cancellation of the caller (a stop) ends the others
    early."""
    outcomes: list[Exception | None] = [None] * len(attempts)
    # Shared by the workers: each takes the next attempt not yet started.
    queue = iter(enumerate(attempts))

    async def worker() -> None:
        for index, attempt in queue:
            try:
                await attempt()
            except Exception as error:  # this profile's outcome, never the others'
                outcomes[index] = error

    if len(attempts) <= 1:
        await worker()  # nothing to overlap: no task to start
        return outcomes
    async with asyncio.TaskGroup() as group:
        for _ in range(min(limit, len(attempts))):
            group.create_task(worker())
    return outcomes


def longest_wait(errors: Sequence[Exception]) -> Exception:
    """The failure a pass raises for its backoff: the one whose Retry-After is longest, so the
    backoff honours it; of equals the first given (the earliest profile), so what is raised does
    not depend on which PUT came back first."""
    return max(  # `max` keeps the first of equals
        errors,
        key=lambda e: (e.retry_after or 0.0) if isinstance(e, RelayHttpError) else 0.0,
    )
