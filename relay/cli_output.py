"""What every `talaria-relay` command shares: its exit codes and its output lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def say(line: str = "") -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    print(f"talaria-relay: {message}", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
