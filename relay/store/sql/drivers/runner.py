"""The `Runner` port: one transaction at a time, on the raw driver of one dialect.

A body is written once, as an async function of a `Tx`, for both dialects. On Postgres it runs on
asyncpg and awaits the server. On SQLite every `Tx` call completes without suspending, so the
store drives the same body to its end synchronously, inside its writer thread (`drive`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from relay.store.sql.dialect import Compiled, Dialect, Row

T = TypeVar("T")
NO_PARAMS: Mapping[str, Any] = {}


class Tx(Protocol):
    """The statements of one transaction (or of one autocommit read)."""

    async def rows(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> list[Row]: ...

    async def run(self, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> int:
        """Execute; the number of rows it changed."""

    async def many(self, q: Compiled, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute once per parameter set, as one batch."""


Body = Callable[[Tx], Coroutine[Any, Any, T]]
# One statement of a batch with its parameters; a sequence of parameter sets runs it once each.
Step = tuple[Compiled, Mapping[str, Any] | Sequence[Mapping[str, Any]]]
# A statement with one parameter set; one with a parameter set for each of its runs.
Call = tuple[Compiled, Mapping[str, Any]]
Many = tuple[Compiled, Sequence[Mapping[str, Any]]]


@dataclass(slots=True)
class Stats:
    """What a store has sent to its database, for `bench` and the statement-count tests."""

    transactions: int = 0
    statements: int = 0
    # Write transactions whose commit is durable: on SQLite, each one an fsync.
    writes: int = 0
    # SQLite write transactions committed without an fsync (`durable=False`).
    unsynced: int = 0


class Runner(Protocol):
    dialect: Dialect
    stats: Stats

    async def read(self, body: Body[T]) -> T:
        """Run a body of reads in autocommit: each statement sees its own snapshot."""

    async def write(self, body: Body[T], *, single: bool = False, durable: bool = True) -> T:
        """Run `body` as one write transaction; `single` marks a body of one statement.

        `durable=False`: a commit that a power cut (never a crash of the process) may undo, for
        a write whose loss costs only time; SQLite then commits without an fsync.
        """

    async def batch(self, steps: Sequence[Step]) -> list[Row]:
        """Run straight-line `steps` (none waits on an earlier one's answer) as one write
        transaction; the rows of the last step."""

    def bound_waits(self, seconds: float) -> None:
        """Wait `seconds` at most for a server (a runner without one has nothing to bound)."""

    async def close(self) -> None: ...


async def first(tx: Tx, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> Row | None:
    found = await tx.rows(q, params)
    return found[0] if found else None


async def scalar(tx: Tx, q: Compiled, params: Mapping[str, Any] = NO_PARAMS) -> Any:
    row = await first(tx, q, params)
    return None if row is None else row[0]


async def run_steps(tx: Tx, steps: Sequence[Step]) -> list[Row]:
    """`steps` in order on `tx`; the last step's rows."""
    found: list[Row] = []
    for q, params in steps:
        if isinstance(params, Mapping):
            found = await tx.rows(q, params)
        else:
            await tx.many(q, params)
            found = []
    return found


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, here and now."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a SQLite transaction body awaited something other than its Tx")
