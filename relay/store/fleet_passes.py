"""A replica's passes over the last hour, as its fleet row carries them: one character a minute.

`passes` is at most `SLOTS` characters, oldest minute first; its last character is the minute of
the row's `pass_at` (store time, ms; minutes count from the Unix epoch). Each character says what
the minute held: `f` a failed pass, `o` only ok passes, `b` no pass but a backoff running, `.`
nothing. A minute with a failure is `f` whatever else it held. A row without a pass has `""`.
Sixty bytes ride on each pass's write: the ring needs no store call of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SLOTS = 60
SLOT_MS = 60_000
OK, FAILED, BACKOFF, NONE = "o", "f", "b", "."
MARKS = frozenset(OK + FAILED + BACKOFF + NONE)
# Which mark a minute keeps when it held several.
_RANK = {NONE: 0, BACKOFF: 1, OK: 2, FAILED: 3}


@dataclass(frozen=True, slots=True)
class Pass:
    """One finished pass on the store's clock (ms): `ok` or not, and the backoff it started."""

    at: int
    ok: bool
    backoff_until: int | None = None


def valid(passes: str) -> bool:
    return len(passes) <= SLOTS and set(passes) <= MARKS


def encode(recent: Iterable[Pass], anchor_ms: int | None) -> str:
    """The ring of `recent` ending at the minute of `anchor_ms` (the row's `pass_at`)."""
    if anchor_ms is None:
        return ""
    last = anchor_ms // SLOT_MS
    first = last - SLOTS + 1
    slots = [NONE] * SLOTS

    def mark(minute: int, what: str) -> None:
        if first <= minute <= last and _RANK[what] > _RANK[slots[minute - first]]:
            slots[minute - first] = what

    for one in recent:
        if one.backoff_until is not None and one.backoff_until > one.at:
            end = min(one.backoff_until, anchor_ms) // SLOT_MS
            for minute in range(max(one.at // SLOT_MS + 1, first), end + 1):
                mark(minute, BACKOFF)
        mark(one.at // SLOT_MS, OK if one.ok else FAILED)
    return "".join(slots).lstrip(NONE)


def hour(passes: str, anchor_ms: int | None, now_ms: int) -> str:
    """The `SLOTS` minutes up to `now_ms`'s from a ring ending at `anchor_ms`; after it, `.`."""
    if anchor_ms is None or not passes:
        return NONE * SLOTS
    shift = now_ms // SLOT_MS - anchor_ms // SLOT_MS
    padded = NONE * SLOTS + passes + NONE * max(shift, 0)
    if shift < 0:  # a row from a clock ahead of ours: its latest minutes are not shown
        padded = padded[:shift]
    return padded[-SLOTS:]
