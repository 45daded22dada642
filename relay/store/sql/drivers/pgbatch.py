"""A Postgres write batch in one round trip: every step sent to `relay_batch` in one call.

asyncpg has no pipelining, so a transaction of N statements costs N + 2 round trips (BEGIN with
its SET LOCALs, each statement, COMMIT). `relay_batch` (a PL/pgSQL function, migration 0006)
takes the statements' SQL and their parameters and runs them in order, so one
`SELECT * FROM relay_batch(…)` in autocommit is the whole transaction: atomic, one round trip,
nothing left on the session (PgBouncer's transaction mode is safe).

How a step travels: its SQL as `Compiled.batched` gives it, `EXECUTE`d `USING` one text array
of its values (`_text`), so no value is ever part of the SQL text. The last step's rows come
back as one `json` object each (not `jsonb`: it keeps the column order).

Timeouts: `lock_timeout` is set inside, transaction-local (`set_config(…, true)`), before any
step. `statement_timeout` cannot be: the server arms it when a statement starts, so one set
inside the call bounds nothing. The call is bounded from the client instead, as every statement
run alone is, by the same `statement_timeout`, for the whole batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from relay.store.sql.dialect import Compiled, Row
from relay.store.sql.drivers.runner import Step

FUNCTION = "relay_batch"
# Its argument types: the statements, how many parameter sets each runs with, how many
# parameters each takes, every parameter value in order, whether to answer the last step's rows,
# and (name, value) pairs of transaction-local settings. Counts travel as text too: text[] is
# the one array asyncpg sends without asking the server about its type first (round trips, and
# a session setting changed meanwhile).
ARGUMENTS = ("text[]", "text[]", "text[]", "text[]", "boolean", "text[]")
SIGNATURE = f"{FUNCTION}({', '.join(ARGUMENTS)})"
_NAMES = ("statements", "runs", "widths", "args", "answer", "settings")
CALL = Compiled(
    f"SELECT * FROM {FUNCTION}("
    + ", ".join(f"${n}::{kind}" for n, kind in enumerate(ARGUMENTS, 1))
    + ")",
    _NAMES,
    {},
)
# The call itself refused (no context from inside the function): the function is missing (a
# database below 0006, or a signature this code does not know), or the role may not run it.
_UNUSABLE = ("42883", "42501")


class _Unsendable(Exception):
    """A value with no text form here: its batch runs statement by statement instead."""


def call_params(steps: Sequence[Step], settings: Mapping[str, str]) -> dict[str, Any] | None:
    """The call's parameters for `steps`; None when they cannot go as one call (a parameter
    without a type, a value of a type not sent as text, a last step answering columns whose
    JSON form is not the driver's value)."""
    statements: list[str] = []
    runs: list[str] = []
    widths: list[str] = []
    args: list[str | None] = []
    for q, params in steps:
        if q.batched is None or q.names is None:
            return None
        sets = [params] if isinstance(params, Mapping) else params
        statements.append(q.batched)
        runs.append(str(len(sets)))
        widths.append(str(len(q.names)))
        try:
            args.extend(_text(value) for one in sets for value in q.args(one))
        except _Unsendable:
            return None
    answer = bool(steps) and isinstance(steps[-1][1], Mapping) and steps[-1][0].returns
    if answer and not steps[-1][0].json_rows:
        return None  # rows the JSON form would change (a void column answers "", not None)
    pairs = [part for setting in settings.items() for part in setting]
    return dict(zip(_NAMES, (statements, runs, widths, args, answer, pairs), strict=True))


def decoded(found: Sequence[Row]) -> list[Row]:
    """The last step's rows, from their JSON objects: values in column order, names dropped
    (two columns may share a name)."""
    return [json.loads(r[0], object_pairs_hook=lambda ps: tuple(v for _, v in ps)) for r in found]


def unusable(error: BaseException | None) -> bool:
    """Whether the call failed because the function cannot be called, not because of a step."""
    # asyncpg's error, by its attributes: this module is read without the driver (`grants`).
    return (
        getattr(error, "sqlstate", None) in _UNUSABLE
        and getattr(error, "context", None) is None
        and FUNCTION in str(error)
    )


def _text(value: Any) -> str | None:
    """Postgres' text form of a value the driver would send; the step's cast reads it back."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, list) and all(type(member) is str for member in value):
        # A text[] (a listed parameter): an array literal read by its cast, its members
        # double-quoted so no comma, brace, space or NULL is special.
        quoted = ('"' + m.replace("\\", "\\\\").replace('"', '\\"') + '"' for m in value)
        return "{" + ",".join(quoted) + "}"
    raise _Unsendable(type(value).__name__)
