"""What the store's contract tests share: fixed times, a registration and its key, and turns.

Times are fixed milliseconds (`NOW`); `run` makes a turn, `sync` writes a pass of the replica
hosting some, and `shown` is what a test compares of the rows a pass returns.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from key_support import ed25519_pem

from relay.store import ProfileGrant, RelayConfig, RelayStore, RunState

NOW = 1_800_000_000_000
SECOND = 1000
RELAY = "https://relay.example"
PUBLISHER = "https://hermes.example"
KEY_ID = "key-1"
IDENTITY_RE = re.compile(r"^pfi_[0-9a-f]{32}$")


def grant(name: str) -> ProfileGrant:
    """A deterministic, valid grant for profile `name`."""
    return ProfileGrant(
        identity=f"pfi_{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}", profile_id=f"prf_{name}"
    )


def make_config(key_ref: str, profiles: Iterable[str] = ("alpha",)) -> RelayConfig:
    """A registration with the relay under the key `key_ref`, granting `profiles`."""
    return RelayConfig(
        url=RELAY,
        publisher_id=PUBLISHER,
        key_id=KEY_ID,
        key_ref=key_ref,
        profiles={name: grant(name) for name in profiles},
    )


async def saved_config(store: RelayStore, profiles: Iterable[str] = ("alpha",)) -> RelayConfig:
    """Save a key and a config naming it; return the config as saved."""
    config = make_config(await store.save_key(KEY_ID, ed25519_pem()), profiles)
    await store.save_config(config)
    return config


LEASE = 20 * SECOND
RETENTION = 15 * 60 * SECOND
A, B, C = "replica-a", "replica-b", "replica-c"


def run(
    session: str = "s1",
    *,
    stream: str | None = "t1",
    phase: str = "running",
    started: int = NOW,
    updated: int = NOW,
    owner: str = A,
    title: str = "Title",
) -> RunState:
    """A turn of session `session`, hosted by `owner` (replica A)."""
    return RunState(session, stream, "default", title, phase, started, updated, owner)


async def sync(store: RelayStore, owner: str, *live: RunState, now: int = NOW) -> list[RunState]:
    """A pass's write of `owner` hosting `live`: the rows it publishes."""
    written = await store.pass_write(owner, live, now, lease_ms=LEASE, retention_ms=RETENTION)
    return list(written.runs)


def shown(runs: list[RunState]) -> list[tuple[str, str | None, str, str]]:
    """Each row's session, turn, phase and owner: what a test compares."""
    return [(r.session_id, r.stream_id, r.phase, r.owner) for r in runs]
