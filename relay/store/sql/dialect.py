"""SQLAlchemy Core statements compiled once per dialect, to run on the raw driver.

What runs per call is the SQL text compiled at first use, with its parameters in the driver's
order. Only what SQLAlchemy has no generic form for differs by dialect (`insert` with
`ON CONFLICT`, two-argument `greatest`/`least`, a list parameter).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Boolean,
    ColumnElement,
    Executable,
    Integer,
    String,
    Table,
    Text,
    TextClause,
    bindparam,
    func,
    literal,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.sql.compiler import Compiled as SaCompiled
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import NullType, TypeEngine

Name = Literal["sqlite", "postgres"]
Params = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Compiled:
    """One statement's SQL text, ready for `sqlite3` (named) or asyncpg (positional `$n`)."""

    sql: str
    # Positional parameter order for asyncpg; None for sqlite3's named style.
    names: tuple[str, ...] | None
    # Values SQLAlchemy bound from literals in the statement (`id = 1`, `+ 1`).
    defaults: Mapping[str, Any]
    # Postgres: the text `relay_batch` runs (`pgbatch`), each `$n` read from one text array as
    # `($1[n]::TYPE)`; None where a parameter has no SQL type (such a batch runs as a loop).
    batched: str | None = None
    # Whether it answers rows (a SELECT, or RETURNING), and whether those rows, as a batch
    # gives them back (JSON), decode to what the driver gives: every column of an integer,
    # boolean or string type (not a void function's, nor a float's NaN, nor a timestamp).
    returns: bool = False
    json_rows: bool = False
    # The positional values from a parameter mapping, in C: `args` runs on every call.
    _pick: Callable[[Params], tuple[Any, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = self.names or ()
        # itemgetter of one name answers the value itself, not a tuple of it.
        pick = itemgetter(*names) if len(names) > 1 else lambda values: (values[names[0]],)
        object.__setattr__(self, "_pick", pick if names else lambda values: ())

    def args(self, params: Params) -> Any:
        values = {**self.defaults, **params} if self.defaults else params
        return values if self.names is None else self._pick(values)


# Compared and hashed by identity (there are two, `SQLITE` and `POSTGRES`): each aggregate's
# statements are cached by dialect, and a field-wise hash is a Python call on every statement.
@dataclass(frozen=True, slots=True, eq=False)
class Dialect:
    """What differs between SQLite and Postgres, and the compiler for each."""

    name: Name

    @property
    def postgres(self) -> bool:
        return self.name == "postgres"

    def insert(self, table: Table) -> Any:
        """An INSERT that has `on_conflict_do_nothing` / `on_conflict_do_update`."""
        return postgresql.insert(table) if self.postgres else sqlite.insert(table)

    def greatest(self, a: Any, b: Any) -> ColumnElement[Any]:
        # SQLite's two-argument max() and min() are scalar: its GREATEST and LEAST.
        return func.greatest(a, b) if self.postgres else func.max(a, b)

    def least(self, a: Any, b: Any) -> ColumnElement[Any]:
        return func.least(a, b) if self.postgres else func.min(a, b)

    def listed(self, name: str) -> tuple[TableValuedAlias, ColumnElement[Any]]:
        """The text values of list parameter `name` as a table (`value`), and a value's place.
        A statement compiled once cannot take `IN (:a, :b, …)` of any length, so the list is one
        parameter: a text[] that Postgres unnests, a JSON array that SQLite's json_each reads."""
        if self.postgres:
            values = func.unnest(bindparam(name, type_=postgresql.ARRAY(Text)))
            listed = values.table_valued("value", with_ordinality="rank").render_derived("listed")
            return listed, listed.c.rank
        # json_each names its columns itself: `key` is an array member's index.
        values = func.json_each(bindparam(name, type_=Text))
        listed = values.table_valued("key", "value").alias("listed")
        return listed, listed.c.key

    def list_value(self, values: Sequence[str]) -> Any:
        """What a `listed` parameter is bound to."""
        return list(values) if self.postgres else json.dumps(list(values))

    def compile(self, statement: Executable) -> Compiled:
        compiled: SaCompiled = statement.compile(dialect=_sa_dialect(self.name))  # type: ignore[attr-defined]
        binds = compiled.binds  # type: ignore[attr-defined]
        # `binds` lists an anonymous parameter under its template key too; the driver sees only
        # the rendered name, so only that goes in (it keeps the per-call merge small).
        rendered = compiled.bind_names  # type: ignore[attr-defined]
        defaults = {rendered[bind]: bind.value for bind in binds.values() if not bind.required}
        sql = str(compiled)
        if not self.postgres:
            return Compiled(sql, None, defaults)
        names = tuple(compiled.positiontup)  # type: ignore[attr-defined]
        types = {rendered[bind]: bind.type for bind in binds.values()}
        returns = statement.is_select or bool(getattr(compiled, "effective_returning", None))
        columns = getattr(statement, "exported_columns", ())
        json_rows = all(isinstance(column.type, _JSON_EXACT) for column in columns)
        # A text() statement may or may not answer rows: it never goes into a batch.
        batched = None if isinstance(statement, TextClause) else _for_batch(sql, names, types)
        return Compiled(sql, names, defaults, batched, bool(returns), returns and json_rows)


def closed_below(column: Any) -> ColumnElement[bool]:
    """`column >= ` the least BIGINT: always true, it closes a range below, so `column < bound`
    of a bound the planner cannot see reads as an index range, not a third of the rows (a full
    scan's worth), with or without statistics (docs/query-plans.md)."""
    return column >= literal(-(2**63), BigInteger)  # type: ignore[no-any-return]


def bind(column: Any, name: str | None = None) -> BindParameter[Any]:
    """A parameter for `column`'s values, named after it unless `name` says otherwise."""
    return bindparam(name or column.key, type_=column.type)


SQLITE = Dialect("sqlite")
POSTGRES = Dialect("postgres")


@functools.cache
def _sa_dialect(name: Name) -> Any:
    if name == "postgres":
        return pg_asyncpg.dialect()  # type: ignore[no-untyped-call]
    return sqlite.dialect(paramstyle="named")


# Column types whose JSON form (`row_to_json`) reads back as the value asyncpg decodes.
_JSON_EXACT = (Integer, Boolean, String)
# A parameter `$n` (not part of an identifier such as `a$1`), and a type's modifier `(64)`.
_PARAMETER = re.compile(r"(?<![\w$])\$(\d+)")
_MODIFIER = re.compile(r"\([^)]*\)")


def _for_batch(sql: str, names: tuple[str, ...], types: Mapping[str, Any]) -> str | None:
    """`sql` with each `$n` read from a batch's text array: `($1[n]::TYPE)`, the bind's own type
    without its modifier (a cast to VARCHAR(64) would cut a longer value short; the column
    refuses it, as it does the driver's). None if a parameter has no type, or the text holds a
    literal (a `$n` inside one is not a parameter)."""
    if "'" in sql:
        return None
    casts: list[str] = []
    for name in names:
        type_: TypeEngine[Any] = types[name]
        if isinstance(type_, NullType):
            return None
        casts.append(_MODIFIER.sub("", type_.compile(dialect=_sa_dialect("postgres"))))
    return _PARAMETER.sub(lambda found: f"($1[{found[1]}]::{casts[int(found[1]) - 1]})", sql)


Row = Sequence[Any]
