"""`talaria-relay status`: the facts document the operator page shows (`relay.operator.facts`),
gathered and judged by the same code, as lines for a terminal or as it is (`--json`,
docs/operating.md#status-json), so `status` and the page never disagree."""

from __future__ import annotations

import time
from typing import Any

from relay.operator.facts import VERSION, gather
from relay.operator.judge import backing_off, failure, migrate_hint, relative
from relay.publishing.clock import offset_text
from relay.store import RelayStore, StoreTarget
from relay.store.keys.keyring import PASSPHRASE_ENV
from relay.store.migrations import Standing


async def collect(store: RelayStore, found: Standing | None = None) -> dict[str, Any]:
    """The status document of `store` (`found`: its schema, if already read)."""
    # Leases are on the store's clock: judged against it, not this host's (docs/clock.md).
    now_ms = await store.clock_ms() or int(time.time() * 1000)
    return await gather(store, now_ms, standing=found)


def unmigrated(target: StoreTarget, found: Standing) -> dict[str, Any]:
    """The status of a SQL store this code does not run on: its schema state, and what fixes
    it (below head: `migrate`; ahead: a newer release)."""
    hint = f"{migrate_hint(target)} to bring it to head {found.head}"
    if found.ahead:
        newer = "run that release here (this code's `migrate` cannot help)"
        hint = f"it needs {found.needs()}: {newer}"
    return {
        "version": VERSION,
        "store": {"backend": target.backend, "url": target.display, "schema": found.document()},
        "hint": hint,
    }


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
    store = status["store"]
    lines = [f"store        {store['backend']}  {store['url']}"]
    if (schema := store["schema"]) is not None:
        state = "at head" if schema["at_head"] else f"NOT at head {schema['head']}"
        if schema.get("ahead"):
            verdict = "compatible" if schema["compatible"] else "not compatible"
            state = f"ahead of this code (head {schema['head']}): {verdict}"
        lines.append(f"schema       {schema['current'] or 'none'} ({state})")
    if "hint" in status:
        return "\n".join([*lines, f"hint         {status['hint']}"])
    lines.append(f"verdict      {status['headline']}")
    lines += [f"problem      {problem}" for problem in status["problems"]]
    registration = status["registration"]
    if registration is None:
        lines.append("registration none: pair the server with Talaria Relay")
    else:
        lines += [
            f"relay        {registration['relay_url']}",
            f"publisher    {registration['publisher_id']}",
            f"key          {registration['key_id']}  {_key_text(registration)}",
        ]
    for profile in status["profiles"]:
        match = "identity ok" if profile["identity_matches"] else "identity CHANGED: re-enroll"
        lines.append(f"profile      {profile['name']} → {profile['profile_id']}  ({match})")
        lines.append(
            f"  queued     {profile['announcements_unsent']} announcement(s) unsent, "
            f"{profile['outbox_depth']} deletion(s) unacknowledged, "
            f"{profile['presence_leases']} live presence lease(s)"
        )
    if status["revision_floor"] is not None:
        lines.append(f"revision     {status['revision_floor']}")
    for replica in status["fleet"]["replicas"]:
        lines.append(f"replica      {replica_line(replica, status['generated_at'])}")
    return "\n".join(lines)


def replica_line(replica: dict[str, Any], now_ms: int) -> str:
    named = f"{replica['name']}, " if replica["name"] else ""
    line = (
        f"{named}incarnation {replica['incarnation']}: {replica['runs']} run(s), "
        f"{replica['claims']} claim(s), {'alive' if replica['alive'] else 'lease ended'}"
    )
    if "release" in replica:
        line += (
            f"; talaria-relay {replica['release']} (schema head {replica['schema_head']}), "
            f"pid {replica['pid']} on {replica['host']}, "
            f"seen {relative(replica['seen_at'] - now_ms)}"
        )
    if isinstance(offset := replica.get("clock_offset_s"), int | float):
        line += f", clock {offset_text(offset)}"
    if (last := replica.get("last_pass")) is not None:
        line += f", last pass {last['outcome']} {relative(last['at'] - now_ms)}"
    if backing_off(replica, now_ms):
        retry = relative(replica["backoff_until"] - now_ms)
        line += f", backing off after {failure(replica)}, retrying {retry}"
    return line
