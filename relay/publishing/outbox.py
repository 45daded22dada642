"""Viewed acknowledgements, each sent after the snapshot carrying its session's outcome, and the
deleted-session outbox: persisted, bound once to one relay scope, removed only by the relay's
ack (Talaria Web 1.20 semantics)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from relay.host import Host
from relay.protocol import session_path, viewed_body
from relay.publishing.leases import Leases
from relay.publishing.logs import Sender
from relay.store import DeletedScope, DeletedView, ProfileGrant, RelayConfig
from relay.store.contract import DeletedOutbox

# Whether a profile is still the one enrolled (not recreated) and not disabled.
Publishes = Callable[[str, ProfileGrant], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class View:
    """A viewed (or deleted) session to acknowledge after the snapshot that carries its outcome."""

    profile: str | None
    through: int
    deleted: DeletedView | None = None


def scope(config: RelayConfig, grant: ProfileGrant) -> DeletedScope:
    """The relay scope a grant of `config` publishes to."""
    return DeletedScope(config.url, config.publisher_id, grant.profile_id)


@dataclass(eq=False)
class Outbox:
    """Queued views in memory, deleted ones in the store; each sent once the relay can take it."""

    store: DeletedOutbox
    host: Host
    send: Sender
    leases: Leases
    publishes: Publishes
    views: dict[str, View] = field(default_factory=dict, init=False)
    # The deletions this replica holds claims on, and when it asked for them (`Leases.asking`).
    _claimed: set[str] = field(default_factory=set, init=False)
    _asked: float = field(default=0.0, init=False)

    async def ready(self, config: RelayConfig, *, claim: bool = True) -> list[tuple[str, View]]:
        """What a pass sends after its snapshot: the queued views, then the deleted outbox bound
        once to this registration's scope, minus sessions that still exist; only deletions this
        replica claimed (another's deliver theirs). Without `claim` (the pass's view found
        nothing to claim) the outbox is left alone."""
        ready = list(self.views.items())
        if not claim:
            self._claimed = set()
            return ready
        views = await self._claim()
        bound = 0
        for profile in {view.profile for view in views if view.scope is None}:
            grant = config.profiles.get(profile)
            if grant is not None and await self.publishes(profile, grant):
                bound += await self.store.bind_deleted(
                    profile, grant.identity, scope(config, grant)
                )
        if bound:
            views = await self._claim()
        # A staged deletion must not clear a session that survived a failed removal.
        for v in views:
            if not await self.host.session_exists(v.session_id):
                ready.append((v.session_id, View(v.profile, v.through, v)))
        return ready

    async def _claim(self) -> list[DeletedView]:
        """Claim what no other replica is delivering (and renew what this one is)."""
        leases = self.leases
        self._asked = leases.asking()
        views = await self.store.claim_deleted(leases.owner, leases.now_ms(), leases.lease_ms)
        self._claimed = {view.id for view in views}
        return views

    async def flush(self, config: RelayConfig, ready: list[tuple[str, View]]) -> None:
        """Send the views queued before the snapshot just published."""
        for sid, view in ready:
            if view.deleted:
                if await self.host.session_exists(sid):
                    continue
                if self.leases.lapsing(self._asked):
                    await self._claim()
                # A claim past its own window is not trusted either: the next pass asks again.
                if view.deleted.id not in self._claimed or self.leases.lapsing(self._asked):
                    continue
            answered = False
            for profile, grant in config.profiles.items():
                if not self.host.profiles_match(view.profile, profile) or not await self.publishes(
                    profile, grant
                ):
                    continue
                if view.deleted and (
                    view.deleted.identity != grant.identity
                    or view.deleted.scope != scope(config, grant)
                ):
                    continue
                path = session_path(config.publisher_id, grant.profile_id, sid, "viewed")
                await self.send(path, viewed_body(view.through), profile)
                answered = True
            if view.deleted:
                # A permanent refusal is final too: resending it every pass would never end.
                if answered:
                    await self.store.ack_deleted(view.deleted.id, view.through)
            elif self.views.get(sid) is view:
                del self.views[sid]
