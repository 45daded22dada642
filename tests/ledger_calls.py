"""The started ledger's marks alone, as tests write them: a scoped claim of no scope."""

from __future__ import annotations

from relay.store.contract import StartedLedger


async def mark_sent(store: StartedLedger, profile_id: str, *session_ids: str) -> None:
    """Mark these sessions of one scope announced: `claim_started_scopes` with only `sent`."""
    sent = [(profile_id, session_id) for session_id in session_ids]
    await store.claim_started_scopes((), "marker", 0, 1, sent=sent)
