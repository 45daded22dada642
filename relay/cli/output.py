"""What every `talaria-relay` command shares: its exit codes, its output lines, and the check
that a store it is to read is there at all."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from relay.errors import InvalidInputError, StoreUnavailableError
from relay.health import absence
from relay.store import StoreTarget
from relay.store.url import source

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
# `add(name, run, text, store_text=None, **options)`: a subcommand running `run`, with a `--store`
# that it uses as `store_text` says (`relay.cli.main.parser`).
Add = Callable[..., argparse.ArgumentParser]


def switches(sub: argparse.ArgumentParser, **helps: str) -> None:
    """An on/off `--name` for each keyword (`dry_run` is `--dry-run`), with its help."""
    for name, text in helps.items():
        sub.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=text)


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
