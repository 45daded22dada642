"""What a store holds, for `talaria-relay status`: everything an operator asks, no secret.

The JSON shape (`collect(...)`) is stable; docs/operating.md documents it.
"""

from __future__ import annotations

import time
from typing import Any

from relay.publishing.fingerprint import key_state
from relay.store import RelayStore, RunState, StoreTarget
from relay.store.keys.keyring import PASSPHRASE_ENV
from relay.store.migrations import Standing, standing
from relay.store.url import command


async def collect(store: RelayStore, target: StoreTarget) -> dict[str, Any]:
    """The status document of the store at `target`."""
    now_ms = int(time.time() * 1000)
    if store.backend_name == "postgres":
        # Leases are on the server's clock: judged against it, not this host's (docs/clock.md).
        view = await store.pass_view("talaria-relay status", [], [], now_ms)
        now_ms = view.store_ms or now_ms
    schema: dict[str, Any] | None = None
    if target.url is not None:
        schema = (await standing(target)).document()
    config = await store.load_config()
    registration = None
    profiles: list[dict[str, Any]] = []
    if config is not None:
        key_encrypted, key_fingerprint = await key_state(store, config.key_ref)
        registration = {
            "relay_url": config.url,
            "publisher_id": config.publisher_id,
            "key_id": config.key_id,
            "key_fingerprint": key_fingerprint,
            "key_encrypted": key_encrypted,
        }
        identities = await store.identities()
        profiles = [
            {
                "profile": name,
                "profile_id": grant.profile_id,
                "identity_matches": identities.get(name) == grant.identity,
            }
            for name, grant in config.profiles.items()
        ]
    ledger = [
        {
            "profile_id": scope.profile_id,
            "floor": scope.floor,
            "unsent": sum(not entry.sent for entry in scope.entries),
            "sent": sum(entry.sent for entry in scope.entries),
        }
        for scope in await store.started_ledger()
    ]
    leases = await store.presence_leases()
    claims = [
        (entry.claimed_by, entry.claimed_until)
        for scope in await store.started_ledger()
        for entry in scope.entries
        if not entry.sent and entry.claimed_by and entry.claimed_until
    ]
    return {
        "store": {"backend": target.backend, "url": target.display, "schema": schema},
        "registration": registration,
        "profiles": profiles,
        "revision_floor": await store.revision_floor(),
        "started": ledger,
        "deleted_outbox": len(await store.pending_deleted()),
        "presence_leases": sum(lease.active and lease.expires_at > now_ms for lease in leases),
        "replicas": replicas(await store.run_states(), claims, now_ms),
        "fleet": [m.document() for m in await store.fleet() if m.live(now_ms)],
    }


def unmigrated(target: StoreTarget, found: Standing) -> dict[str, Any]:
    """The status of a SQL store this code does not run on: its schema state, and what fixes
    it (below head: the `migrate` command; ahead and not compatible: a newer release)."""
    if found.ahead:
        return {
            "store": {"backend": target.backend, "url": target.display, "schema": found.document()},
            "hint": f"it needs {found.needs()}: run that release here "
            "(this code's `migrate` cannot help)",
        }
    return {
        "store": {"backend": target.backend, "url": target.display, "schema": found.document()},
        "hint": f"run {command('migrate', target)} to bring it to head {found.head}",
    }


def replicas(
    runs: list[RunState], claims: list[tuple[str, int]], now_ms: int
) -> list[dict[str, Any]]:
    """Each replica the store has heard of lately: its owner id, what it holds, whether it lives.

    A replica is alive while it renews its leases; one that is not is taken over.
    """
    held: dict[str, dict[str, Any]] = {}

    def entry(owner: str, until: int) -> dict[str, Any]:
        # `name/incarnation` (a named replica's process); a bare id is an incarnation alone.
        name, _, process = owner.rpartition("/")
        found = held.setdefault(
            owner,
            {
                "owner": owner,
                "name": name or None,
                "incarnation": process,
                "runs": 0,
                "claims": 0,
                "lease_until": 0,
            },
        )
        found["lease_until"] = max(found["lease_until"], until)
        return found

    for run in runs:
        entry(run.owner, run.lease_until)["runs"] += 1
    for owner, until in claims:
        entry(owner, until)["claims"] += 1
    for found in held.values():
        found["alive"] = found["lease_until"] > now_ms
    return [held[owner] for owner in sorted(held)]


def _key_text(registration: dict[str, Any]) -> str:
    encrypted, found = registration["key_encrypted"], registration["key_fingerprint"]
    if encrypted is None:
        return "MISSING"
    if found is None and encrypted:
        return f"encrypted: {PASSPHRASE_ENV} is not set, or does not open it"
    if found is None:
        return "UNREADABLE"
    return f"{found}  ({'encrypted' if encrypted else 'not encrypted'})"


def render(status: dict[str, Any]) -> str:
    """The status as lines for a terminal."""
    store = status["store"]
    lines = [f"store        {store['backend']}  {store['url']}"]
    if store["schema"] is not None:
        schema = store["schema"]
        state = "at head" if schema["at_head"] else f"NOT at head {schema['head']}"
        if schema.get("ahead"):
            verdict = "compatible" if schema["compatible"] else "not compatible"
            state = f"ahead of this code (head {schema['head']}): {verdict}"
        lines.append(f"schema       {schema['current'] or 'none'} ({state})")
    if "hint" in status:
        return "\n".join([*lines, f"hint         {status['hint']}"])
    registration = status["registration"]
    if registration is None:
        lines.append("registration none: pair the server with Talaria Relay")
    else:
        key = f"{registration['key_id']}  {_key_text(registration)}"
        lines += [
            f"relay        {registration['relay_url']}",
            f"publisher    {registration['publisher_id']}",
            f"key          {key}",
        ]
    for profile in status["profiles"]:
        match = "identity ok" if profile["identity_matches"] else "identity CHANGED: re-enroll"
        lines.append(f"profile      {profile['profile']} → {profile['profile_id']}  ({match})")
    lines.append(f"revision     {status['revision_floor']}")
    for scope in status["started"]:
        lines.append(
            f"started      {scope['profile_id']}: {scope['unsent']} unsent, {scope['sent']} sent"
        )
    lines.append(f"deleted      {status['deleted_outbox']} awaiting acknowledgement")
    lines.append(f"presence     {status['presence_leases']} live lease(s)")
    for replica in status["replicas"]:
        state = "alive" if replica["alive"] else "lease ended"
        named = f"{replica['name']}, " if replica["name"] else ""
        lines.append(
            f"replica      {named}incarnation {replica['incarnation']}: {replica['runs']} run(s), "
            f"{replica['claims']} claim(s), {state}"
        )
    now_ms = int(time.time() * 1000)
    for member in status.get("fleet", ()):
        lines.append(f"fleet        {fleet_line(member, now_ms)}")
    return "\n".join(lines)


def clock_offset(offset_ms: int) -> str:
    """`0.4 s ahead of the store`, `2.0 s behind the store`, `in step with the store`."""
    if abs(offset_ms) < 50:
        return "in step with the store"
    side = "ahead of" if offset_ms > 0 else "behind"
    return f"{abs(offset_ms) / 1000:.1f} s {side} the store"


def fleet_line(member: dict[str, Any], now_ms: int) -> str:
    """One live service: who, what code, where, and how its passes go."""

    def ago(at: int) -> str:
        return f"{max(now_ms - at, 0) / 1000:.0f}s ago"

    line = (
        f"{member['owner']}  talaria-relay {member['version']} (schema head "
        f"{member['schema_head']}), pid {member['pid']} on {member['host']}, seen "
        f"{ago(member['seen_at'])}"
    )
    offset = member.get("clock_offset_ms")
    if isinstance(offset, int):
        line += f", clock {clock_offset(offset)}"
    if member["pass_at"] is not None:
        line += f", last pass {member['pass_outcome']} {ago(member['pass_at'])}"
    if member["backoff_until"] is not None and member["backoff_until"] > now_ms:
        left = (member["backoff_until"] - now_ms) / 1000
        line += f", backing off after {member['backoff_class']} for {left:.0f}s more"
    return line
