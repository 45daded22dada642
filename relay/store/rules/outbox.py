"""The deleted-session outbox's rules: one queued acknowledgement per (session, profile)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from relay.store.backend import Binding, Claim, Deletion
from relay.store.records import DeletedView

Outbox = dict[tuple[str, str], DeletedView]  # by (session_id, profile), in the order queued
Claims = dict[str, tuple[str, int]]  # view id -> (owner, until)


def enqueue(outbox: Outbox, deletion: Deletion) -> DeletedView:
    """A queued entry keeps its id; its `through` rises to cover the session's newer runs."""
    new = deletion.new
    key = (new.session_id, new.profile)
    queued = outbox.setdefault(key, new)
    if deletion.session_live and new.through > queued.through:
        queued = outbox[key] = replace(queued, through=new.through)
    return queued


def bind(outbox: Outbox, binding: Binding) -> int:
    profile, identity = binding.profile, binding.identity
    unbound = [
        key
        for key, view in outbox.items()
        if view.profile == profile and view.scope is None and view.identity in (None, identity)
    ]
    for key in unbound:
        outbox[key] = replace(outbox[key], identity=identity, scope=binding.scope)
    return len(unbound)


def pending(outbox: Outbox) -> list[DeletedView]:
    """Every queued entry, oldest `through` first."""
    return sorted(outbox.values(), key=lambda v: (v.through, v.id))


def claimable(claims: Claims, view: DeletedView, owner: str, now_ms: int) -> bool:
    """Unclaimed, its claim expired, or the owner's own: what a claim by `owner` takes."""
    held = claims.get(view.id)
    return held is None or held[0] == owner or held[1] <= now_ms


def any_claimable(outbox: Outbox, claims: Claims, owner: str, now_ms: int) -> bool:
    """Whether a claim by `owner` would take any entry now."""
    return any(claimable(claims, view, owner, now_ms) for view in outbox.values())


def claim(outbox: Outbox, claims: Claims, request: Claim) -> list[DeletedView]:
    """Lease queued entries, oldest `through` first: free ones, expired ones and the owner's.

    A claim whose entry was acknowledged since is forgotten here.
    """
    for view_id in claims.keys() - {view.id for view in outbox.values()}:
        del claims[view_id]
    owner, now_ms = request.owner, request.now_ms
    free = [v for v in pending(outbox) if claimable(claims, v, owner, now_ms)][: request.limit]
    claims.update((view.id, (owner, request.until)) for view in free)
    return free


def held(outbox: Outbox, claims: Claims) -> list[tuple[str, int]]:
    """The claims on entries still queued: an acknowledged entry's claim is over with it."""
    queued = {view.id for view in outbox.values()}
    return [held for view_id, held in claims.items() if view_id in queued]


def ack(outbox: Outbox, view_id: str, through: int) -> bool:
    """Remove the entry only if it is still the one acknowledged (same id and `through`)."""
    for key, view in outbox.items():
        if (view.id, view.through) == (view_id, through):
            del outbox[key]
            return True
    return False


def merge(outbox: Outbox, incoming: Iterable[DeletedView]) -> None:
    """A queued entry keeps its id, the later `through` and whichever binding it has."""
    for view in incoming:
        key = (view.session_id, view.profile)
        kept = outbox.get(key)
        if kept is None:
            outbox[key] = view
            continue
        kept = replace(kept, through=max(kept.through, view.through))
        if kept.scope is None and view.scope is not None:
            kept = replace(kept, identity=view.identity, scope=view.scope)
        outbox[key] = kept
