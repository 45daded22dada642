"""Copy all relay state from one store to another: legacy JSON → SQLite → Postgres, and back.

The copy merges (`RelayStore.merge_state`), so running it twice changes nothing and an interrupted
copy completes when run again. It refuses to replace a different registration, or a profile's
different identity, unless forced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from relay.errors import TransferConflictError
from relay.store.contract import RelayStore
from relay.store.records import RelayConfig, StateBatch

BATCH_ENTRIES = 1000

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class TransferReport:
    """What a copy brought (or, dry, would bring) over."""

    registration: str  # "copied", "unchanged" or "none"
    profiles: int
    identities: int
    revision_floor: int
    scopes: int
    ledger_entries: int
    deleted: int
    presence: int


def _same_registration(a: RelayConfig, b: RelayConfig) -> bool:
    return replace(a, key_ref=b.key_ref) == b  # the generation is not compared


async def transfer(
    source: RelayStore,
    target: RelayStore,
    *,
    force: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> TransferReport:
    """Copy `source` into `target`; the target's revision floor ends at the larger of both."""
    config, theirs = await source.load_config(), await target.load_config()
    if config and theirs and not _same_registration(config, theirs) and not force:
        raise TransferConflictError(
            f"{target.display_url} is registered as {theirs.publisher_id} at {theirs.url} "
            f"(key {theirs.key_id}), not as the source is: use --force to replace it"
        )
    identities, existing = await source.identities(), await target.identities()
    clashes = sorted(p for p, i in identities.items() if existing.get(p, i) != i)
    if clashes and not force:
        raise TransferConflictError(
            f"profiles {', '.join(clashes)} have other identities in {target.display_url}: "
            "use --force to replace them"
        )
    ledger = await source.started_ledger()
    batch = StateBatch(
        identities=identities,
        revision_floor=await source.revision_floor(),
        deleted=tuple(await source.pending_deleted()),
        presence=tuple(await source.presence_leases()),
    )
    registration = "none" if config is None else "unchanged"
    if config is not None and not (theirs and _same_registration(config, theirs)):
        registration = "copied"
    report = TransferReport(
        registration,
        len(config.profiles) if config else 0,
        len(identities),
        max(batch.revision_floor, await target.revision_floor()),
        len(ledger),
        sum(len(scope.entries) for scope in ledger),
        len(batch.deleted),
        len(batch.presence),
    )
    if dry_run:
        return report
    if config is not None and registration == "copied":
        # The key first: a registration must never name a key the target lacks. It goes as it
        # is stored: an encrypted key stays encrypted, and no passphrase is needed to copy it.
        key_ref = await target.save_key(config.key_id, await source.stored_key(config.key_ref))
        await target.save_config(replace(config, key_ref=key_ref))
    for profile in clashes:
        await target.forget_profile_identity(profile)
    await target.merge_state(batch)
    done = 0  # the ledger goes a batch of entries at a time, so a large one shows progress
    for scope in ledger:
        for start in range(0, max(len(scope.entries), 1), BATCH_ENTRIES):  # an empty one too
            chunk = scope.entries[start : start + BATCH_ENTRIES]
            await target.merge_state(StateBatch(started=(replace(scope, entries=chunk),)))
            done += len(chunk)
            if progress is not None:
                progress(done, report.ledger_entries)
    return report
