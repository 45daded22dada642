"""A Postgres store's connection budget, set by URL parameters: how many connections, for how
long, and how long one statement or lock wait may take.

    postgresql://relay@db/relay?pool_size=4&pool_max_idle=60&statement_timeout=10&lock_timeout=2

Times are seconds (fractions allowed). The timeouts apply per transaction with `SET LOCAL`, so
they hold behind PgBouncer in transaction mode and leave no session state; a statement run
alone, in autocommit, is bounded by `statement_timeout` from the client, which cancels it on
the server. Migrations take none of these: they are run by an operator, once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from relay.errors import InvalidInputError

# Whole connections; more than this from one process is a typo, not a budget.
MAX_POOL_SIZE = 1000
# A day: a longer idle time or lifetime is "for ever", which is what these exist to prevent.
MAX_POOL_SECONDS = 86_400.0
# An hour: no statement of the store needs anything near it.
MAX_TIMEOUT_S = 3600.0


@dataclass(frozen=True, slots=True)
class Budget:
    """What one store may hold and wait for; the defaults are what a URL without them gets."""

    pool_size: int = 10
    pool_max_idle: float = 300.0
    pool_max_lifetime: float = 3600.0
    statement_timeout: float = 30.0
    lock_timeout: float = 10.0

    def set_local(self) -> str:
        """The statements that open a transaction with this budget's timeouts, in one round trip:
        checked numbers in whole ms, so nothing from the URL reaches the SQL as it was typed."""
        return (
            f"BEGIN; SET LOCAL statement_timeout = {_ms(self.statement_timeout)}; "
            f"SET LOCAL lock_timeout = {_ms(self.lock_timeout)}"
        )

    def bounded(self, wait_s: float) -> Budget:
        """This budget with its statement and lock waits `wait_s` at most (`bound_waits`)."""
        return replace(
            self,
            statement_timeout=min(self.statement_timeout, wait_s),
            lock_timeout=min(self.lock_timeout, wait_s),
        )

    def batch_settings(self) -> dict[str, str]:
        """A one-call write batch's `set_config(…, true)`: its statement's bound is the client's."""
        return {"lock_timeout": str(_ms(self.lock_timeout))}


PARAMETERS = tuple(Budget.__dataclass_fields__)
DEFAULT = Budget()
_LIMITS = {
    "pool_max_idle": MAX_POOL_SECONDS,
    "pool_max_lifetime": MAX_POOL_SECONDS,
    "statement_timeout": MAX_TIMEOUT_S,
    "lock_timeout": MAX_TIMEOUT_S,
}


def budget(query: Mapping[str, str]) -> Budget:
    """The budget a store URL's parameters set; InvalidInputError naming a bad one."""
    size = query.get("pool_size", str(DEFAULT.pool_size))
    if not size.isascii() or not size.isdigit() or not 1 <= int(size) <= MAX_POOL_SIZE:
        raise InvalidInputError(f"pool_size must be a whole number in 1..{MAX_POOL_SIZE}")
    seconds = {name: _seconds(name, query[name]) for name in _LIMITS if name in query}
    return Budget(pool_size=int(size), **seconds)


def number(raw: str) -> float:
    """`raw` as a float; NaN, which fails every range check, when it is not one."""
    try:
        return float(raw)
    except ValueError:
        return math.nan


def _seconds(name: str, raw: str) -> float:
    value = number(raw)
    # At least a millisecond: the server counts these in whole milliseconds, and 0 means "none".
    if not 0.001 <= value <= _LIMITS[name]:  # NaN fails this too
        raise InvalidInputError(f"{name} must be a number of seconds in [0.001, {_LIMITS[name]:g}]")
    return value


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
