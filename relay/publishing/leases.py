"""How long a replica's claims (an announcement or a deletion being delivered) and run rows stay
its own: it renews them while it lives; when it dies, another takes them once the lease ended.

A holder trusts a lease only within its trust window (as River's leader does): from the moment
it asked for the lease, by its own monotonic clock, for the lease's length minus the time a
request may take. Past it, the lease may have ended and another replica may hold the work, so the
holder sends nothing on it until it has asked the store again. A process frozen past its leases
(SIGSTOP, a GC pause, a VM paused) wakes with every window shut, whatever its wall clock says.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from relay.protocol import REQUEST_TIMEOUT_S
from relay.publishing.clock import ticks as boot_ticks
from relay.store.records import OWNER_LIMIT

DEFAULT_LEASE_S = 20.0
DEFAULT_HEARTBEAT_S = 60.0

# A claim is renewed before a send that could outlast it: one request takes this long at most.
_SEND_MS = math.ceil(REQUEST_TIMEOUT_S * 1000) + 2000


def incarnation(name: str) -> str:
    """The owner id of this process under `name`: `name/<12 hex digits>`, new for every process.
    A process restarted under its name is another replica: the dead one's rows and claims are
    taken over when their leases end, never taken for its own (two live processes given one name
    stay apart too). A name too long for the stored id is cut; the suffix tells them apart."""
    suffix = secrets.token_hex(6)  # 48 bits: two processes of one name never share an id
    return f"{name[: OWNER_LIMIT - len(suffix) - 1]}/{suffix}"


@dataclass(frozen=True, slots=True)
class Leases:
    """One replica's leases: who holds them, for how long, by which clock (Unix seconds: the
    store's, `StoreClock.time`), and the monotonic clock (`ticks`, seconds) their trust windows
    are measured on."""

    owner: str
    lease_ms: int
    clock: Callable[[], float]
    ticks: Callable[[], float] = boot_ticks

    def now_ms(self) -> int:
        return math.floor(self.clock() * 1000)

    def asking(self) -> float:
        """Now, on the monotonic clock: read just before a store call that takes or renews a
        lease, it opens that lease's trust window (`lapsing`)."""
        return self.ticks()

    def lapsing(self, asked: float) -> bool:
        """Whether a lease asked for at `asked` (`asking()`) may end before a request started
        now does: its trust window has shut, and nothing may be sent on it."""
        margin_ms = min(_SEND_MS, self.lease_ms // 2)
        return (self.ticks() - asked) * 1000 + margin_ms > self.lease_ms

    @property
    def poll_s(self) -> float:
        """How often an idle replica renews its runs and looks for leases about to end."""
        return self.lease_ms / 4000
