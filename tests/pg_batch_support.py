"""What the Postgres batch tests share (test_pg_batch, and the same through PgBouncer): steps
over every kind of value the store sends, and what they answer run one by one.

`ten_steps` writes awkward values (bigints past 2^53, negatives, quotes, unicode, NULLs) through
every shape of step; `loop_rows` runs steps one by one in a transaction it rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sql_support import sql_backend
from sqlalchemy import delete, func, insert, literal, select, update

from relay.store.sql import schema as t
from relay.store.sql.dialect import POSTGRES, Row, bind
from relay.store.sql.drivers.postgres import PostgresRunner
from relay.store.sql.drivers.runner import Step, Tx, run_steps

BIG = 2**53 + 1  # past what a JSON double holds exactly
TITLES = ["", 'q\'uote "double" back\\slash', "ünïcødé 😀 中文 \t\n", "%s $1 :name ?"]

INSERT_RUN = POSTGRES.compile(
    insert(t.runs).values(
        {c: bind(c) for c in t.runs.c if c.key not in ("sending_by", "sending_until", "taken_from")}
    )
)
INSERT_LEASE = POSTGRES.compile(insert(t.presence).values({c: bind(c) for c in t.presence.c}))
RENEW = POSTGRES.compile(
    update(t.runs)
    .where(t.runs.c.owner == bind(t.runs.c.owner))
    .values(lease_until=t.runs.c.lease_until + 1)
)
TOUCH_ALL = POSTGRES.compile(update(t.runs).values(updated_at=t.runs.c.updated_at + 1))
FORGET = POSTGRES.compile(
    delete(t.turns).where(t.turns.c.forgotten_at < bind(t.turns.c.forgotten_at))
)
ALLOCATE = POSTGRES.compile(
    insert(t.revision)
    .values(id=1, floor=bind(t.revision.c.floor))
    .returning(t.revision.c.floor, literal(True), t.revision.c.floor > 0)
)
READ_BACK = POSTGRES.compile(
    select(
        # The columns of 0005 on (a test runs these on a database at 0005).
        *(c for c in t.runs.c if c.key != "taken_from"),
        t.presence.c.active,
        t.presence.c.seq,
        (t.runs.c.started_at > 0).label("positive"),
        func.char_length(t.runs.c.title),
    )
    .select_from(t.runs.outerjoin(t.presence, t.presence.c.tab_id == t.runs.c.session_id))
    .order_by(t.runs.c.started_at.desc(), t.runs.c.session_id)
)


def run_row(n: int, **values: Any) -> dict[str, Any]:
    """A `relay_runs` row of awkward values (bigints past 2^53, negatives, odd titles)."""
    row = {
        "session_id": f"s{n}",
        "stream_id": None,
        "profile": None,
        "title": TITLES[n % len(TITLES)],
        "phase": "running",
        "started_at": [BIG, 2**63 - 1, -1, 0][n % 4] - n,
        "updated_at": 0,
        "owner": "web-1/abc",
        "lease_until": 2**62,
    }
    return {**row, **values}


def lease(n: int, active: bool) -> dict[str, Any]:
    """A `relay_presence` row of awkward values."""
    return {
        "profile": TITLES[n % len(TITLES)],
        "tab_id": f"s{n}",
        "seq": BIG * (n + 1),
        "active": active,
        "expires_at": 1,
        "updated_at": 2,
    }


def ten_steps(first: int = 0) -> list[Step]:
    """Ten straight-line steps over every kind of value the store sends, the last answering."""
    n = first
    return [
        (INSERT_RUN, run_row(n, stream_id="t0", profile="default")),
        (INSERT_RUN, [run_row(n + 1), run_row(n + 2, title=TITLES[1] * 3)]),
        (INSERT_RUN, []),
        (INSERT_LEASE, lease(n, True)),
        (INSERT_LEASE, [lease(n + 1, False), lease(n + 2, True)]),
        (RENEW, {"owner": "web-1/abc"}),
        (RENEW, {"owner": "nobody's"}),
        (TOUCH_ALL, {}),
        (FORGET, {"forgotten_at": BIG}),
        (READ_BACK, {}),
    ]


def typed(rows: Sequence[Row]) -> list[list[tuple[type, Any]]]:
    """Rows with each value's type: True == 1 in Python, not in a row."""
    return [[(type(value), value) for value in row] for row in rows]


def postgres_runner(store: Any) -> PostgresRunner:
    """The Postgres runner under a store opened on a Postgres URL."""
    found = sql_backend(store).runner
    assert isinstance(found, PostgresRunner)
    return found


class _Undo(Exception):
    """Ends a loop-path transaction after its rows were read, so the batch starts alike."""


async def loop_rows(db: PostgresRunner, steps: Sequence[Step]) -> list[Row]:
    """What the steps answer run one by one in a transaction, which is then rolled back."""
    seen: list[Row] = []

    async def body(tx: Tx) -> None:
        seen.extend(await run_steps(tx, steps))
        raise _Undo

    with pytest.raises(_Undo):
        await db.write(body)
    return seen
