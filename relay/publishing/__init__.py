"""The publisher (`publisher.RelayPublisher`) and the parts it is made of, each one concept.

`states` builds a profile's rows from records (pure), `fanout` sends the profiles' snapshots
side by side, `runs` tells the store what this replica hosts, `announcements` sends
session-started events, `outbox` sends viewed and deleted acknowledgements, `loop` runs
coalesced passes with backoff, and `logs` reports what happened (once, where a failure repeats
every pass).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from relay.store import ProfileGrant

# A signed PUT to the relay under the publisher's current key.
Put = Callable[[str, bytes], Awaitable[None]]
# Whether a profile is still the one enrolled (not recreated) and not disabled.
Publishes = Callable[[str, ProfileGrant], Awaitable[bool]]
