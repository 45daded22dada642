"""What every `talaria-relay` command shares: its exit codes, its output lines, and the check
that a store it is to read is there at all."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from relay.errors import InvalidInputError
from relay.health import absence
from relay.store import StoreTarget

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def say(line: str = "") -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    print(f"talaria-relay: {message}", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def require_existing(target: StoreTarget, flag: str = "--store") -> None:
    """Reading a store that is not there is a mistake: say where we looked, create nothing."""
    if (absent := absence(target)) is not None:
        raise InvalidInputError(f"{flag}: {absent}")
