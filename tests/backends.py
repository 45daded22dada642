"""Which store backends a test runs on; each has a marker, so `pytest -m memory` picks one.

A test that takes `backend` (or `store_url`, or `store`) runs on every backend unless the closest
`backends` marker names fewer: storage tests run everywhere, publisher and service behaviour once
on the memory store (`on(MEMORY)`), and what only a real store shows (its files or rows, other
processes, a reopen) on the real ones (`on(*REAL)`).
"""

from __future__ import annotations

from typing import Any

import pytest

MEMORY = "memory"
REAL = ("json", "sqlite", "postgres")
ALL = (MEMORY, *REAL)


def on(*names: str) -> pytest.MarkDecorator:
    """Run the marked test, class or module (`pytestmark = on(...)`) on these backends only."""
    unknown = set(names) - set(ALL)
    if unknown or not names:
        raise ValueError(f"backends must be some of {ALL}, not {names}")
    return pytest.mark.backends(*names)


def params(names: tuple[str, ...]) -> list[Any]:
    """One parameter a backend, carrying that backend's marker."""
    return [pytest.param(name, marks=getattr(pytest.mark, name)) for name in names]


def kill_runs(short: int, long: int) -> pytest.MarkDecorator:
    """A crash test's `kills`: `short` in the suite, `long` only with `-m kills`."""
    return pytest.mark.parametrize(
        "kills",
        [
            pytest.param(short, id="short"),
            pytest.param(long, id="long", marks=pytest.mark.kills),
        ],
    )
