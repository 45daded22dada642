"""The fleet: every running service as it recorded itself in the store.

A service writes its row when it starts and renews it with its leases (`seen_at`, `live_until`:
no round trip of its own on a steady pass). It is live while `live_until` is ahead; a row unseen
for `FORGET_MS` (a day) is deleted by the next service that records itself. `status` lists the
live fleet; `migrate` refuses a contract migration while a live row's code would break on it.
"""

from __future__ import annotations

# A dead service's row is kept this long after it was last seen, so `status` can still name it
# for a while after a crash; then the next recording deletes it.
FORGET_MS = 24 * 3600 * 1000
