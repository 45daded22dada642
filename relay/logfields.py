"""The facts of a `[relay]` line as `extra` fields, so a JSON formatter emits them as fields.

The message text stays what it always was (people and old log filters read it); the facts go on
the `LogRecord` as `relay_…` attributes, apart from `logging`'s and the web app's, each left out
without a value. docs/observability.md lists each field and each event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

Value: TypeAlias = str | int | float
Facts: TypeAlias = Mapping[str, Value]


def fields(
    event: str,
    *,
    profile: str | None = None,
    status: int | None = None,
    failure: str | None = None,
    retry_in: float | None = None,
    kind: str | None = None,
    clock_offset_s: float | None = None,
) -> dict[str, Value]:
    """The `extra` of one line: its event, and each fact that has a value."""
    named: dict[str, Value | None] = {
        "relay_event": event,
        "relay_profile": profile,
        "relay_status": status,
        "relay_failure": failure,
        "relay_retry_in": None if retry_in is None else round(retry_in, 3),
        "relay_kind": kind,
        "relay_clock_offset_s": None if clock_offset_s is None else round(clock_offset_s, 3),
    }
    return {name: value for name, value in named.items() if value is not None}


def of_error(
    event: str, error: BaseException, *, kind: str | None = None, retry_in: float | None = None
) -> dict[str, Value]:
    """The fields of a line about `error`: its class, and its HTTP status and profile if any."""
    status = getattr(error, "status", None)
    profile = getattr(error, "profile", None)
    return fields(
        event,
        failure=type(error).__name__,
        status=status if isinstance(status, int) else None,
        profile=profile if isinstance(profile, str) else None,
        retry_in=retry_in,
        kind=kind,
    )
