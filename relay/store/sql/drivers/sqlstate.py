"""What a Postgres SQLSTATE means for the store: a wrong request, a server that cannot take the
work now ("unavailable", retried after a backoff), and which connections must go.

One table for the runner (asyncpg) and the migrations (SQLAlchemy over asyncpg, through
`migrate.migration_error`), so a command and a replica classify the same answer the same way.
"""

from __future__ import annotations

from relay.errors import StoreError, StoreUnavailableError
from relay.refused import nothing_listening, unknown_host

# Classes and codes after which the same request may work later: the connection or the server
# (08, 57: shutdown, crash, not accepting connections yet), a login refused (28: pg_hba, a
# password; an operator fixes it, the request was not wrong), contention (40: serialization,
# deadlock, a query cancelled by a recovery conflict on a standby; 55: lock_not_available, an
# object in use), resources (53: too_many_connections, disk full), the timeouts this store sets
# (57014 query_canceled is class 57), a missing database (3D000), and a server that takes no
# writes (25006 read_only_sql_transaction: a demoted primary, a standby, default_transaction_
# read_only).
_UNAVAILABLE_CLASSES = ("08", "28", "40", "53", "55", "57")
_UNAVAILABLE_CODES = ("25006", "3D000")
# After these the server behind the connection is the wrong one or is going away: the
# connection is dropped, never reused, so the next one is made afresh (and a multi-host URL
# finds the new primary). 40001 on our READ COMMITTED transactions comes from a standby's
# recovery conflict; 57014 (our own statement_timeout) and 57P05 (idle_session_timeout already
# closed it) need nothing more, but dropping is never wrong, only a reconnect.
_DROP_CLASSES = ("08", "57P")
_DROP_CODES = ("25006", "40001")
# A few words naming the cause, before the server's own message.
_CAUSES = {
    "25006": "the server is read-only (a standby, a demoted primary, or read-only by setting)",
    "28000": "the server refused the login",
    "28P01": "the server refused the password",
    "53300": "the server has no connection slot left",
    "55P03": "a lock wait outlasted lock_timeout",
    "57014": "a statement outlasted statement_timeout",
    "57P01": "the server is shutting down",
    "57P02": "the server crashed",
    "57P03": "the server is not accepting connections yet",
    "40001": "the server cancelled the statement (a standby's recovery conflict)",
    "42501": "the role lacks a privilege",  # the runner adds whose grants would fix it
}


def unavailable(state: str) -> bool:
    """Whether an error with this SQLSTATE says "try again later", not "this request is wrong"."""
    return state.startswith(_UNAVAILABLE_CLASSES) or state in _UNAVAILABLE_CODES


def drops_connection(state: str) -> bool:
    """Whether the connection that got this SQLSTATE must be closed, not returned to the pool."""
    return state.startswith(_DROP_CLASSES) or state in _DROP_CODES


def explained(error: BaseException, state: str, text: str) -> str:
    """The driver's message, led by what its SQLSTATE says, or by why no server answered."""
    if state:
        return f"{_CAUSES[state]}: {text}" if state in _CAUSES else text
    return nothing_listening(error) or unknown_host(error) or text


def store_error(display: str, text: str, *, failed: bool = False) -> StoreError:
    """The store's error, naming it: a request that failed, or a store unavailable for now."""
    if failed:
        return StoreError(f"relay store {display} failed: {text}")
    return StoreUnavailableError(f"relay store {display} is unavailable: {text}")
