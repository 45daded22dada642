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
    """Refuse a store to read that is not there, saying where we looked, creating nothing: bad
    input when given with `flag` (exit 2), else unreachable (exit 3, as `check` says of it)."""
    if (absent := absence(target)) is None:
        return
    if given is not None and given.strip():
        raise InvalidInputError(f"{flag}: {absent}")
    raise StoreUnavailableError(
        f"{absent} (the store URL from {source(None)}; name one with {flag})"
    )
