"""The fleet: every running service as it recorded itself in the store (`contract.Fleet`).

A service writes its row when it starts; `keep_alive` and each pass's write renew it, so a steady
pass makes no round trip of its own. `status` lists the live fleet; `migrate` refuses a contract
migration while a live member's code would break on it. A row from a release before 0009 has no
clock offset (None) and no passes ("").
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, fields, replace
from typing import Any

from relay.errors import InvalidInputError
from relay.protocol import MAX_SAFE_INTEGER
from relay.store import checks, fleet_passes
from relay.store.records import OWNER_LIMIT, named
from relay.version import __version__

# A dead service's row is kept this long after it was last seen, so `status` can still name it
# for a while after a crash; then the next service that records itself deletes it.
FORGET_MS = 24 * 3600 * 1000
VERSION_LIMIT = 64
HOST_LIMIT = 255
CLASS_LIMIT = 64


@dataclass(frozen=True, slots=True)
class FleetMember:
    """One running service, as it recorded itself (from 0009 on, with its clock and passes)."""

    owner: str  # `name/incarnation`
    # What code: the library's version, and the schema head it was built for.
    version: str
    schema_head: str
    host: str
    pid: int
    started_at: int
    # When it was last seen, and until when it counts as live.
    seen_at: int
    live_until: int
    # Its last pass: when, and `ok` or the failure's outcome.
    pass_at: int | None = None
    pass_outcome: str | None = None
    # Its backoff: until when, and the failure's class name (never a message or a secret).
    backoff_until: int | None = None
    backoff_class: str | None = None
    # This replica's wall clock minus the store's (ms), when it has read the store's time.
    clock_offset_ms: int | None = None
    # Its passes over the last hour, a character a minute up to `pass_at`'s (`fleet_passes`).
    passes: str = ""

    @named("owner")
    def __post_init__(self) -> None:
        checks.text("owner", self.owner, OWNER_LIMIT)
        checks.text("version", self.version, VERSION_LIMIT)
        checks.text("schema_head", self.schema_head, 32)
        checks.text("host", self.host, HOST_LIMIT)
        checks.safe_int("pid", self.pid)
        checks.time_ms("started_at", self.started_at)
        checks.time_ms("seen_at", self.seen_at)
        checks.time_ms("live_until", self.live_until)
        checks.optional_int("pass_at", self.pass_at)
        checks.optional_text("pass_outcome", self.pass_outcome, 32)
        checks.optional_int("backoff_until", self.backoff_until)
        checks.optional_text("backoff_class", self.backoff_class, CLASS_LIMIT)
        checks.optional_int("clock_offset_ms", self.clock_offset_ms, -MAX_SAFE_INTEGER)
        if not isinstance(self.passes, str) or not fleet_passes.valid(self.passes):
            marks = "".join(sorted(fleet_passes.MARKS))
            raise InvalidInputError(f"passes must be at most {fleet_passes.SLOTS} of {marks!r}")

    def live(self, now_ms: int) -> bool:
        return self.live_until > now_ms

    def seen(self, now_ms: int, until: int) -> FleetMember:
        return replace(self, seen_at=now_ms, live_until=max(until, now_ms))

    def document(self) -> dict[str, Any]:
        """The row as plain values (the JSON store's form, and `status --json`)."""
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_document(cls, found: Any) -> FleetMember:
        """A member from a stored row; fields this code does not know are left out."""
        if not isinstance(found, dict):
            raise InvalidInputError("a fleet row must be an object")
        missing = [name for name in FIELDS[:8] if name not in found]
        if missing:
            raise InvalidInputError(f"a fleet row lacks {', '.join(missing)}")
        known = {name: found[name] for name in FIELDS if name in found}
        if known.get("passes", "") is None:
            known["passes"] = ""
        return cls(**known)


# Every field of a row, in the order of the table's columns.
FIELDS = tuple(field.name for field in fields(FleetMember))
# Without the fields 0009 added: a database below it has no columns for them.
BEFORE_RING = tuple(name for name in FIELDS if name not in ("clock_offset_ms", "passes"))


def this_process(owner: str, schema_head: str, now_ms: int, until: int) -> FleetMember:
    """The row of the service running in this process, started now."""
    return FleetMember(
        owner=owner,
        version=__version__[:VERSION_LIMIT],
        schema_head=schema_head,
        host=socket.gethostname()[:HOST_LIMIT] or "-",
        pid=os.getpid(),
        started_at=now_ms,
        seen_at=now_ms,
        live_until=max(until, now_ms),
    )
