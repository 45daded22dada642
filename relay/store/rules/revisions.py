"""The revision counter's rule."""

from __future__ import annotations

from relay.protocol import MAX_SAFE_INTEGER


def allocate(floor: int, count: int, now_ms: int) -> int | None:
    """The last of `count` revisions after `floor` (the first is max(floor + 1, now)).

    None when it would pass 2^53-1, where a revision is no longer exact on the wire: then none
    is handed out and the floor stays.
    """
    last = max(floor + 1, now_ms) + count - 1
    return None if last > MAX_SAFE_INTEGER else last
