"""On Postgres a ledger claim that also marks entries announced is one `relay_batch` round trip,
its listed scopes sent in the batch as an array literal, whatever their names hold."""

from __future__ import annotations

from backends import on
from pg_batch_support import postgres_runner

from benchmarks.proxy import latency_proxy
from relay.store import open_store, resolve

pytestmark = on("postgres")

T0 = 1_800_000_000_000
LEASE_MS = 60_000
# Names an array literal would misread unquoted or unescaped.
SCOPES = ('quo"te', "back\\slash", "com,ma", "{braces}", "NULL", " spaced ", "ünï", "plain")
OLDEST_FIRST = ("s0", "s1", "s2")


async def test_a_mark_and_a_claim_are_one_round_trip(store_url: str) -> None:
    """Counted at a proxy in front of Postgres: marking entries announced and claiming across
    scopes is one round trip; the marked entries are sent, and the claim takes the unsent ones
    scope by scope as listed (names with quotes, backslashes, commas, braces), oldest first."""
    address = resolve(store_url).sqlalchemy_url
    async with latency_proxy(address.host or "127.0.0.1", address.port or 5432, 0) as (
        port,
        counts,
    ):
        proxied = address.set(host="127.0.0.1", port=port).update_query_dict({"pool_size": "1"})
        async with open_store(proxied.render_as_string(hide_password=False)) as store:
            seen = {scope: [(f"s{n}", T0 + n) for n in range(3)] for scope in SCOPES}
            await store.record_started_scopes(seen, T0)
            first = await store.claim_started_scopes(SCOPES, "web-1", T0, LEASE_MS)
            pairs = [(e.profile_id, e.session_id) for e in first]
            assert pairs == [(scope, sid) for scope in SCOPES for sid in OLDEST_FIRST]

            before = counts.round_trips
            found = await store.claim_started_scopes(
                reversed(SCOPES), "web-1", T0, LEASE_MS, sent=pairs[:3]
            )
            assert counts.round_trips - before == 1
            assert postgres_runner(store).batch_calls
            assert [(e.profile_id, e.session_id) for e in found] == [
                (scope, sid) for scope in reversed(SCOPES[1:]) for sid in OLDEST_FIRST
            ]
            ledger = {scope.profile_id: scope for scope in await store.started_ledger()}
            assert all(entry.sent for entry in ledger[SCOPES[0]].entries)
            assert not any(entry.sent for entry in ledger[SCOPES[1]].entries)
