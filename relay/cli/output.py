"""What every `talaria-relay` command shares: its exit codes, its output lines, and the check
that a store it is to read is there at all."""

from __future__ import annotations

import sys

from relay.errors import InvalidInputError, StoreUnavailableError
from relay.health import absence
from relay.store import StoreTarget
from relay.store.url import source

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3


def say(line: str = "") -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    print(f"talaria-relay: {message}", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def require_existing(target: StoreTarget, given: str | None, flag: str = "--store") -> None:
    """Reading a store that is not there: say where we looked and where its URL came from, and
    create nothing. A URL given with `flag` is bad input (exit 2); the store that
    `$TALARIA_RELAY_STORE_URL` or the embedded default names is one that cannot be reached
    (exit 3, as `check` says of it)."""
    if (absent := absence(target)) is None:
        return
    if given is not None and given.strip():
        raise InvalidInputError(f"{flag}: {absent}")
    raise StoreUnavailableError(
        f"{absent} (the store URL from {source(None)}; name one with {flag})"
    )
