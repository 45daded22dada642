"""The fleet's rules on its document: owner -> the row as stored (plain values).

Rows stay plain values in the document, so a row a newer release wrote (with fields this code
does not know) is kept as it is until its owner writes it again, and a corrupt row is reported
(`CorruptStateError` naming it) only by what reads the fleet, never by a service's own writes.
"""

from __future__ import annotations

from typing import Any

from relay.errors import CorruptStateError, InvalidInputError
from relay.store.fleet import FORGET_MS, FleetMember

Rows = dict[str, Any]


def record(rows: Rows, member: FleetMember) -> None:
    """Write `member`'s row, and delete the rows last seen more than `FORGET_MS` before it."""
    cutoff = member.seen_at - FORGET_MS
    for owner in [owner for owner, row in rows.items() if _seen(row) < cutoff]:
        del rows[owner]
    rows[member.owner] = member.document()


def renew(rows: Rows, owner: str, now_ms: int, until: int) -> None:
    """Move `owner`'s row to seen at `now_ms`, live until `until` (no row: nothing)."""
    row = rows.get(owner)
    if isinstance(row, dict):
        row["seen_at"] = now_ms
        row["live_until"] = max(until, now_ms)


def members(rows: Rows) -> list[FleetMember]:
    """Every row as a `FleetMember`, by owner; a row that is not one is a `CorruptStateError`."""
    found = []
    for owner in sorted(rows):
        try:
            member = FleetMember.from_document(rows[owner])
        except (InvalidInputError, TypeError) as error:
            raise CorruptStateError(f"fleet row {owner!r} is invalid: {error}") from None
        if member.owner != owner:
            raise CorruptStateError(f"fleet row {owner!r} names another owner {member.owner!r}")
        found.append(member)
    return found


def _seen(row: Any) -> int:
    # A row without a readable time is kept: deleting what cannot be read would hide it.
    seen = row.get("seen_at") if isinstance(row, dict) else None
    return seen if isinstance(seen, int) and not isinstance(seen, bool) else FORGET_MS * 10**6
