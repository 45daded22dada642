"""The crash tests' model of a store: what it must hold after the writes acknowledged so far.

`Model` applies each acknowledged write by the contract's rule, with the answer the writer got.
After a kill the store must equal the model, or the model with the one write that was under way
applied: every record old or new, and all of them from the same side, since each method is atomic.
A value the write under way made up (a minted identity, a new deletion's id) is `ANY` until seen.
Where an answer can be foretold (revisions, claims, removals), the writer's is checked too.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from crash_writer import invocation

from relay.errors import CorruptStateError
from relay.protocol import STARTED_WINDOW_MS
from relay.store import RelayStore, RunState
from relay.store.backend import RunSync
from relay.store.requests import TURN_MEMORY_MS
from relay.store.rules import runs as run_rules

PROBE = "crash-probe"


class _Any:
    """A value the store chose and the model has not seen yet: it matches anything."""

    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()
UNKNOWN: Any = object()  # the answer of a write that was under way when it was killed

Entry = tuple[int, bool, str | None, int | None]  # started_at, sent, claimed_by, claimed_until
View = tuple[str, int, str | None, tuple[str, str, str] | None]  # id, through, identity, scope
Lease = tuple[int, bool, int, int]  # seq, active, expires_at, updated_at
Sections = dict[str, Any]


@dataclass
class Model:
    """The store's state as the acknowledged writes left it."""

    config: tuple[Any, ...] | None = None
    refs: dict[str, str] = field(default_factory=dict)  # key id -> reference `save_key` gave
    keys: dict[str, str | None] = field(default_factory=dict)  # reference -> PEM, None: deleted
    identities: dict[str, str] = field(default_factory=dict)
    floor: int = 0
    scopes: dict[str, int] = field(default_factory=dict)
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    deleted: dict[tuple[str, str], View] = field(default_factory=dict)  # (session, profile)
    claims: dict[str, tuple[str, int]] = field(default_factory=dict)  # deletion id -> owner, until
    leases: dict[tuple[str, str], Lease] = field(default_factory=dict)
    runs: dict[str, RunState] = field(default_factory=dict)
    # Not observed (no public read): kept so a save after a prune is predicted as the store does.
    forgotten: run_rules.Forgotten = field(default_factory=dict)

    def copy(self) -> Model:
        return copy.deepcopy(self)

    # ── writes ────────────────────────────────────────────────────────────────

    def apply(self, op: str, args: dict[str, Any], answer: Any = UNKNOWN) -> list[str]:
        """Apply one write; what its acknowledged `answer` got wrong, if anything."""
        positional, keywords = invocation(op, args)
        expected = getattr(self, f"_{op}")(answer, *positional, **keywords)
        if answer is UNKNOWN or expected is UNKNOWN or _same(expected, answer):
            return []
        return [f"{op}({_short(args)}) answered {answer!r}, the model says {expected!r}"]

    def _save_key(self, answer: Any, key_id: str, pem: str) -> Any:
        # A key id always gets the same reference; the seed learns each one before any kill.
        known = self.refs.get(key_id)
        ref = known if answer is UNKNOWN else answer
        assert ref is not None, "the seed saves every key id before a writer runs"
        self.refs[key_id], self.keys[ref] = ref, pem
        return known or ref

    def _save_config(self, answer: Any, config: Any) -> None:
        self.config = canon_config(config)

    def _delete_key(self, answer: Any, ref: str) -> bool:
        named = self.config is not None and self.config[3] == ref
        removed = self.keys.get(ref) is not None and not named
        if removed:
            self.keys[ref] = None
        return removed

    def _profile_identity(self, answer: Any, profile: str) -> Any:
        stored = self.identities.get(profile)
        if stored is None or stored is ANY:
            self.identities[profile] = ANY if answer is UNKNOWN else answer
            return UNKNOWN
        return stored

    def _forget_profile_identity(self, answer: Any, profile: str) -> None:
        self.identities.pop(profile, None)

    def _allocate_revisions(self, answer: Any, count: int, now_ms: int) -> list[int]:
        last = max(self.floor + 1, now_ms) + count - 1
        self.floor = last
        return list(range(last - count + 1, last + 1))

    def _track_started(self, answer: Any, profile_ids: list[str], now_ms: int) -> None:
        for profile_id in profile_ids:
            self.scopes.setdefault(profile_id, now_ms)

    def _record_started_scopes(
        self, answer: Any, seen: dict[str, list[tuple[str, int]]], now_ms: int
    ) -> None:
        for profile_id, sightings in seen.items():
            floor = self.scopes.setdefault(profile_id, now_ms)
            cutoff = max(floor, now_ms - STARTED_WINDOW_MS)
            for key, entry in list(self.entries.items()):
                if key[0] == profile_id and entry[0] < cutoff:
                    del self.entries[key]
            for session_id, started_at in dict(reversed(sightings)).items():  # first one wins
                if started_at >= cutoff:
                    self.entries.setdefault(
                        (profile_id, session_id), (started_at, False, None, None)
                    )

    def _claim_started_scopes(
        self,
        answer: Any,
        profile_ids: list[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
        limit: int | None = None,
        *,
        sent: list[tuple[str, str]],
    ) -> list[str]:
        for key in sent:
            if (entry := self.entries.get(key)) is not None:
                self.entries[key] = (entry[0], True, None, None)
        free: list[tuple[str, str]] = []  # scope by scope, each oldest first
        for profile_id in profile_ids:
            free += [
                key
                for key, entry in sorted(self.entries.items(), key=lambda k_e: (k_e[1][0], k_e[0]))
                if key[0] == profile_id and not entry[1] and _claimable(entry[2:], owner, now_ms)
            ]
        for key in free[:limit]:
            self.entries[key] = (self.entries[key][0], False, owner, now_ms + lease_ms)
        return [session_id for _, session_id in free[:limit]]

    def _enqueue_deleted(
        self,
        answer: Any,
        session_id: str,
        profile: str,
        now_ms: int,
        *,
        session_live: bool,
        identity: str | None,
        scope: Any,
    ) -> Any:
        key = (session_id, profile)
        if (view := self.deleted.get(key)) is None:
            made = ANY if answer is UNKNOWN else answer["id"]
            view = (
                made,
                now_ms,
                identity,
                None if scope is None else tuple(asdict(scope).values()),
            )
        elif session_live and now_ms > view[1]:
            view = (view[0], now_ms, *view[2:])
        self.deleted[key] = view
        return view_data(key, view)

    def _bind_deleted(self, answer: Any, profile: str, identity: str, scope: Any) -> int:
        bound = 0
        for key, view in self.deleted.items():
            if key[1] == profile and view[3] is None and view[2] in (None, identity):
                self.deleted[key] = (view[0], view[1], identity, tuple(asdict(scope).values()))
                bound += 1
        return bound

    def _claim_deleted(
        self, answer: Any, owner: str, now_ms: int, lease_ms: int, limit: int | None
    ) -> list[dict[str, Any]]:
        free = sorted(
            (view[1], view[0], key)
            for key, view in self.deleted.items()
            if _claimable(self.claims.get(view[0], (None, None)), owner, now_ms)
        )[:limit]
        for _, view_id, _ in free:
            self.claims[view_id] = (owner, now_ms + lease_ms)
        return [view_data(key, self.deleted[key]) for _, _, key in free]

    def _ack_deleted(self, answer: Any, view_id: str, through: int) -> bool:
        for key, view in list(self.deleted.items()):
            if view[:2] == (view_id, through):
                del self.deleted[key]
                self.claims.pop(view_id, None)
                return True
        return False

    def _apply_presence(self, answer: Any, profile: str, tab_id: str, **lease: Any) -> bool:
        seq, now_ms, fence_ms = lease["seq"], lease["now_ms"], lease["fence_ms"]
        # Forgotten leases stay forgotten even when the fence then refuses the update.
        self.leases = {k: v for k, v in self.leases.items() if v[2] + fence_ms > now_ms}
        stored = self.leases.get((profile, tab_id))
        if stored is not None and stored[0] >= seq:
            return False
        expires_at = now_ms + lease["lease_ms"]
        self.leases[profile, tab_id] = (seq, lease["active"], expires_at, now_ms)
        while len(self.leases) > lease["max_tabs"]:
            others = [k for k in self.leases if k != (profile, tab_id)]
            del self.leases[min(others, key=lambda k: (self.leases[k][3], k))]
        return True

    # Runs follow `run_rules`, the rules the SQL store states as statements and the contract
    # suite holds every backend to: here they say what a run write leaves, not how it is done.

    def _pass_write(
        self,
        answer: Any,
        owner: str,
        live: list[RunState],
        now_ms: int,
        *,
        lease_ms: int,
        retention_ms: int,
    ) -> dict[str, Any]:
        ordered = sorted(live, key=lambda run: run.session_id)
        cutoff = max(now_ms - retention_ms, 0)
        forget_before = max(now_ms - max(TURN_MEMORY_MS, retention_ms), 0)
        sync = RunSync(owner, tuple(ordered), now_ms, now_ms + lease_ms, cutoff, forget_before)
        owned = run_rules.sync(self.runs, self.forgotten, sync)
        revisions = self._allocate_revisions(answer, len(owned), now_ms) if owned else []
        return {"runs": [asdict(run) for run in owned], "revisions": revisions}

    def _release_runs(self, answer: Any, owner: str) -> None:
        run_rules.release(self.runs, owner)

    def _keep_alive(self, answer: Any, owner: str, now_ms: int, lease_ms: int) -> int | None:
        run_rules.renew(self.runs, owner, now_ms + lease_ms)
        ends: list[int | None] = [r.lease_until for r in self.runs.values() if r.owner != owner]
        ends += [e[3] for e in self.entries.values() if not e[1] and e[2] not in (None, owner)]
        live = {view[0] for view in self.deleted.values()}
        ends += [u for i, (o, u) in self.claims.items() if o != owner and i in live]
        return min((end for end in ends if end is not None and end > now_ms), default=None)

    # ── what a store shows ────────────────────────────────────────────────────

    def sections(self, probe_ms: int) -> Sections:
        """What `observe` must find, a probe claiming at `probe_ms`."""
        return {
            "config": self.config,
            "keys": {ref: self.keys[ref] for ref in sorted(self.keys)},
            "identities": dict(self.identities),
            "revision floor": self.floor,
            "scopes": dict(self.scopes),
            "started": dict(self.entries),
            "deleted": dict(self.deleted),
            "claimed deletions": sorted(
                view[0]
                for view in self.deleted.values()
                if (claim := self.claims.get(view[0])) is not None and claim[1] > probe_ms
            ),
            "presence": dict(self.leases),
            "runs": dict(self.runs),
        }

    def settle(self, seen: Sections, probe_ms: int, probed: list[str]) -> None:
        """Take the values the store chose (`ANY` so far), and the probe's claims."""
        for profile, identity in list(self.identities.items()):
            if identity is ANY:
                self.identities[profile] = seen["identities"][profile]
        for key, view in list(self.deleted.items()):
            if view[0] is ANY:
                self.deleted[key] = (seen["deleted"][key][0], *view[1:])
        for view_id in probed:
            self.claims[view_id] = (PROBE, probe_ms + 1)

    def adopt(self, seen: Sections, probe_ms: int, probed: list[str]) -> None:
        """After a violation, go on from what the store holds (so one fault is reported once)."""
        self.config, self.identities = seen["config"], dict(seen["identities"])
        self.keys, self.floor = dict(seen["keys"]), seen["revision floor"]
        self.scopes, self.entries = dict(seen["scopes"]), dict(seen["started"])
        self.deleted, self.leases = dict(seen["deleted"]), dict(seen["presence"])
        self.runs = dict(seen["runs"])
        for view_id in seen["claimed deletions"]:
            if view_id not in self.claims or self.claims[view_id][1] <= probe_ms:
                self.claims[view_id] = (
                    "?",
                    probe_ms + 1,
                )  # held by someone: expired by the next round
        for view_id in probed:
            self.claims[view_id] = (PROBE, probe_ms + 1)


def _claimable(claim: tuple[str | None, int | None], owner: str, now_ms: int) -> bool:
    holder, until = claim
    return holder is None or holder == owner or until is None or until <= now_ms


def canon_config(config: Any) -> tuple[Any, ...]:
    grants = tuple((name, g.identity, g.profile_id) for name, g in config.profiles.items())
    return (config.url, config.publisher_id, config.key_id, config.key_ref, grants)


def view_data(key: tuple[str, str], view: View) -> dict[str, Any]:
    scope = (
        None
        if view[3] is None
        else dict(zip(("url", "publisher_id", "profile_id"), view[3], strict=True))
    )
    return {
        "id": view[0],
        "session_id": key[0],
        "profile": key[1],
        "through": view[1],
        "identity": view[2],
        "scope": scope,
    }


def _same(expected: Any, found: Any) -> bool:
    """Equal, where `ANY` in `expected` matches whatever was found."""
    if expected is ANY:
        return True
    if isinstance(expected, dict):
        return (
            isinstance(found, dict)
            and expected.keys() == found.keys()
            and all(_same(v, found[k]) for k, v in expected.items())
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(expected) == len(found)
            and all(_same(e, f) for e, f in zip(expected, found, strict=True))
        )
    return bool(expected == found)


def _short(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}"[:60] for k, v in args.items() if k != "pem")


def differences(expected: Sections, found: Sections) -> list[str]:
    """Each record where `found` is not `expected`."""
    out: list[str] = []
    for name, want in expected.items():
        got = found[name]
        if _same(want, got):
            continue
        if isinstance(want, dict) and isinstance(got, dict):
            for key in sorted(want.keys() | got.keys(), key=repr):
                if not _same(want.get(key), got.get(key)):
                    out.append(f"{name}[{key!r}]: {want.get(key)!r} != {got.get(key)!r}")
        else:
            out.append(f"{name}: {want!r} != {got!r}")
    return out


def matches(expected: Sections, found: Sections) -> bool:
    return all(_same(want, found[name]) for name, want in expected.items())


# ── reading a store back ──────────────────────────────────────────────────────


async def observe(store: RelayStore, refs: list[str], probe_ms: int) -> tuple[Sections, list[str]]:
    """Everything the store holds, in `Model.sections` form; and the deletions the probe claimed.

    Deletion claims show only in who may claim: a probe claiming at `probe_ms` gets every queued
    deletion that no one else holds then, so the rest are the ones held. Its own claims end a
    millisecond later, long before the next writer's clock, so they change nothing the writer does.
    """
    config = await store.load_config()
    keys: dict[str, str | None] = {}
    for ref in sorted(refs):
        try:
            keys[ref] = await store.load_key(ref)
        except CorruptStateError:
            keys[ref] = None
    scopes: dict[str, int] = {}
    entries: dict[tuple[str, str], Entry] = {}
    duplicates: list[str] = []
    for ledger in await store.started_ledger():
        scopes[ledger.profile_id] = ledger.floor
        for e in ledger.entries:
            key = (ledger.profile_id, e.session_id)
            if key in entries:
                duplicates.append(f"started entry {key}")
            entries[key] = (e.started_at, e.sent, e.claimed_by, e.claimed_until)
    deleted: dict[tuple[str, str], View] = {}
    pending = await store.pending_deleted()
    for v in pending:
        if (v.session_id, v.profile) in deleted:
            duplicates.append(f"deletion {(v.session_id, v.profile)}")
        scope = None if v.scope is None else (v.scope.url, v.scope.publisher_id, v.scope.profile_id)
        deleted[v.session_id, v.profile] = (v.id, v.through, v.identity, scope)
    if len({v.id for v in pending}) != len(pending):
        duplicates.append("deletion ids")
    probed = [v.id for v in await store.claim_deleted(PROBE, probe_ms, 1)]
    leases: dict[tuple[str, str], Lease] = {}
    for lease in await store.presence_leases():
        if (lease.profile, lease.tab_id) in leases:
            duplicates.append(f"presence lease {(lease.profile, lease.tab_id)}")
        leases[lease.profile, lease.tab_id] = (
            lease.seq,
            lease.active,
            lease.expires_at,
            lease.updated_at,
        )
    runs: dict[str, RunState] = {}
    for run in await store.run_states():
        if run.session_id in runs:
            duplicates.append(f"run {run.session_id}")
        runs[run.session_id] = run
    seen: Sections = {
        "config": None if config is None else canon_config(config),
        "keys": keys,
        "identities": await store.identities(),
        "revision floor": await store.revision_floor(),
        "scopes": scopes,
        "started": entries,
        "deleted": deleted,
        "claimed deletions": sorted({v[0] for v in deleted.values()} - set(probed)),
        "presence": leases,
        "runs": runs,
        "duplicates": duplicates,
        "generation": 0 if config is None else config.generation,
    }
    return seen, probed
