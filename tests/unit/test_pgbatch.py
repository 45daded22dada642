"""What a Postgres batch sends, without a server: every store statement can go into one, each
value as the text its cast reads back, and the answer decoded in column order."""

from __future__ import annotations

import enum
import importlib
from pathlib import Path

import pytest
from sqlalchemy import BigInteger, bindparam, literal_column, select, text

from relay.cli.grants import grants_sql
from relay.store.sql import schema as t
from relay.store.sql.dialect import POSTGRES, Compiled
from relay.store.sql.drivers import pgbatch

AGGREGATES = ("ledger", "outbox", "presence", "registration", "revisions", "runs", "transfer")
MIGRATION = Path(__file__).resolve().parents[2] / "migrations/versions/0006_batch_function.py"


def store_statements() -> list[tuple[str, Compiled]]:
    found = []
    for name in AGGREGATES:
        compiled = importlib.import_module(f"relay.store.sql.{name}").Statements(POSTGRES)
        found += [(f"{name}.{field}", q) for field, q in vars(compiled).items()]
    return found


def test_every_store_statement_can_go_into_a_batch() -> None:
    """Each parameter of each statement has a SQL type, so no batch falls back to a loop."""
    statements = store_statements()
    assert len(statements) > 40
    for name, q in statements:
        assert q.batched is not None, name
        assert "$1[" in q.batched or not q.names, name
        # A batch may end with any of them but the advisory lock (a void column).
        assert q.json_rows == (q.returns and name != "runs.lock"), name


def test_a_batch_ending_with_a_void_column_runs_as_a_transaction() -> None:
    """`pg_advisory_xact_lock` answers void: None from the driver, "" as JSON. A batch may take
    the lock first, but one ending with it is not sent as one call."""
    lock = importlib.import_module("relay.store.sql.runs").Statements(POSTGRES).lock
    floor = importlib.import_module("relay.store.sql.revisions").Statements(POSTGRES).floor
    assert pgbatch.call_params([(lock, {}), (floor, {})], {}) is not None
    assert pgbatch.call_params([(floor, {}), (lock, {})], {}) is None
    assert pgbatch.call_params([(floor, {}), (lock, [{}])], {}) is not None


def test_parameters_are_read_from_the_array_with_their_type_without_its_length() -> None:
    """`$n` becomes `($1[n]::TYPE)` (VARCHAR, not VARCHAR(64), which would cut a value short);
    a `$` inside an identifier is left alone."""
    q = POSTGRES.compile(
        select(literal_column('"a$1"'))
        .where(bindparam("x", type_=BigInteger) > 0)
        .limit(bindparam("n", type_=BigInteger))
    )
    assert q.batched is not None
    assert '"a$1"' in q.batched
    assert "($1[1]::BIGINT)" in q.batched
    assert "($1[2]::BIGINT)" in q.batched
    claimed = POSTGRES.compile(select(t.started.c.claimed_by).where(t.started.c.claimed_by == "x"))
    assert claimed.batched is not None
    assert "($1[1]::VARCHAR)" in claimed.batched


def test_a_statement_that_cannot_be_batched_says_so() -> None:
    """An untyped parameter, a literal in the text, or a text() statement: no batched form,
    so its batch runs as a transaction."""
    untyped = POSTGRES.compile(select(literal_column("1")).limit(bindparam("n")))
    literal = POSTGRES.compile(select(literal_column("'$1'")))
    raw = POSTGRES.compile(text("UPDATE relay_runs SET title = ''"))
    assert (untyped.batched, literal.batched, raw.batched) == (None, None, None)
    assert pgbatch.call_params([(untyped, {"n": 1})], {}) is None


class Phase(enum.IntEnum):
    ONE = 1


class Name(str):
    def __str__(self) -> str:
        return "not the value"


def test_values_travel_as_the_text_postgres_reads_back() -> None:
    """None is NULL, booleans `true`/`false` (never 1), integers in full past 2^63, a str
    subclass as its characters; a type with no text form here makes the batch a loop."""
    q = POSTGRES.compile(
        select(
            bindparam("a", type_=BigInteger),
            bindparam("b", type_=BigInteger),
            bindparam("c", type_=BigInteger),
        )
    )
    values = {"a": None, "b": True, "c": 2**64}
    params = pgbatch.call_params([(q, values), (q, [{**values, "a": Phase.ONE}])], {"x": "1"})
    assert params is not None
    assert params["args"] == [None, "true", str(2**64), "1", "true", str(2**64)]
    assert (params["runs"], params["widths"], params["settings"]) == (
        ["1", "1"],
        ["3", "3"],
        ["x", "1"],
    )
    assert params["answer"] is False  # the last step is a set of parameter sets
    named = pgbatch.call_params([(q, {"a": Name("it's"), "b": 1.5, "c": -1})], {})
    assert named is not None
    assert named["args"] == ["it's", "1.5", "-1"]
    assert named["answer"] is True
    assert pgbatch.call_params([(q, {"a": b"bytes", "b": 1, "c": 1})], {}) is None


def test_rows_decode_in_column_order_with_repeated_names() -> None:
    """A row's JSON object gives its values in column order, two columns of one name both."""
    found = pgbatch.decoded([('{"b": 1, "a": null, "b": true, "c": "\\u00e9"}',)])
    assert found == [(1, None, True, "é")]


def test_the_migration_grants_and_call_agree_on_the_signature() -> None:
    """The function the migration creates, the one `grants` names and the one the store calls
    have the same argument types."""
    migration = MIGRATION.read_text()
    assert f'SIGNATURE = "{pgbatch.SIGNATURE}"' in migration
    assert pgbatch.CALL.sql.count("::") == len(pgbatch.ARGUMENTS)
    grants = grants_sql("relay_rt", "relay")
    assert f'"public"."relay_batch"({", ".join(pgbatch.ARGUMENTS)})' in grants
    assert 'GRANT EXECUTE ON FUNCTIONS TO "relay_rt";' in grants


@pytest.mark.parametrize("state", ["42883", "42501"])
def test_only_a_refused_call_is_a_missing_function(state: str) -> None:
    """The call refused (no context) means the function cannot be used; the same codes from a
    step inside it (a context naming the function) are that step's failure."""

    class Refused(Exception):
        sqlstate = state
        context: str | None = None

    class Inside(Refused):
        context = "PL/pgSQL function relay_batch(text[],…) line 14 at EXECUTE"

    assert pgbatch.unusable(Refused("function relay_batch(text[], …) does not exist"))
    assert not pgbatch.unusable(Inside("permission denied for table relay_runs"))
    assert not pgbatch.unusable(Refused("permission denied for table relay_runs"))
    assert not pgbatch.unusable(None)
