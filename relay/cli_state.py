"""The `talaria-relay` commands on a store's state: `status`, `rekey` and `import`."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from relay.cli_output import OK, say
from relay.errors import InvalidInputError
from relay.store import StoreTarget, open_store, resolve
from relay.store.keyring import Passphrase, passphrase_from_env, passphrase_from_file
from relay.store.transfer import transfer

# ── status ────────────────────────────────────────────────────────────────────


async def cmd_status(args: argparse.Namespace) -> int:
    from relay.status import collect, render

    target = resolve(args.store)
    async with open_store(args.store) as store:
        status = await collect(store, target)
    say(json.dumps(status, indent=2) if args.json else render(status))
    return OK


# ── rekey ─────────────────────────────────────────────────────────────────────


def _new_passphrase(args: argparse.Namespace) -> Passphrase | None:
    # Never from argv: every user of the machine sees it in `ps`.
    if args.decrypt:
        return None
    if args.to_passphrase_file is not None:
        return passphrase_from_file(args.to_passphrase_file)
    return passphrase_from_env(args.to_passphrase_env)


async def cmd_rekey(args: argparse.Namespace) -> int:
    target = resolve(args.store)
    if _missing(target):
        raise InvalidInputError(f"there is no store at {target.display}")
    passphrase = _new_passphrase(args)
    async with open_store(args.store) as store:
        count = await store.rekey(passphrase)
    how = "unencrypted" if passphrase is None else f"encrypted under {passphrase.source}"
    say(f"{target.display}: {count} key(s), all stored {how}")
    return OK


# ── import ────────────────────────────────────────────────────────────────────


def _profile_homes(args: argparse.Namespace) -> Callable[[str], Path] | None:
    homes: dict[str, Path] = {}
    for item in args.profile_home:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InvalidInputError(f"--profile-home takes NAME=PATH, not {item!r}")
        homes[name] = Path(path).expanduser()
    root = Path(args.profiles_root).expanduser() if args.profiles_root else None
    if not homes and root is None:
        return None

    def home(profile: str) -> Path:
        if profile in homes:
            return homes[profile]
        if root is None:
            raise InvalidInputError(f"no --profile-home given for profile {profile!r}")
        return root / profile

    return home


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and total:
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        print(f"\r  ledger [{bar}] {done}/{total}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)


def _missing(target: StoreTarget) -> bool:
    """A file store that does not exist yet (opening one would create it)."""
    if target.backend == "json":
        return target.path is not None and not target.path.is_dir()
    return target.backend == "sqlite" and target.path is not None and not target.path.exists()


async def cmd_import(args: argparse.Namespace) -> int:
    source_target, target_target = resolve(args.source), resolve(args.target)
    if source_target.display == target_target.display:
        raise InvalidInputError("--from and --to name the same store")
    with tempfile.TemporaryDirectory(prefix="talaria-relay-dry-run-") as scratch:
        destination = args.target
        if args.dry_run and _missing(target_target):
            destination = f"json://{scratch}"  # a dry run creates nothing: compare with empty
        async with (
            open_store(args.source, profile_home=_profile_homes(args)) as source,
            open_store(destination) as target,
        ):
            report = await transfer(
                source, target, force=args.force, dry_run=args.dry_run, progress=_progress
            )
    verb = "would copy" if args.dry_run else "copied"
    say(f"{verb} {source_target.display} → {target_target.display}")
    say(f"  registration     {report.registration} ({report.profiles} profiles)")
    say(f"  identities       {report.identities}")
    say(f"  revision floor   {report.revision_floor}")
    say(f"  started ledger   {report.ledger_entries} entries in {report.scopes} scopes")
    say(f"  deleted outbox   {report.deleted}")
    say(f"  presence leases  {report.presence}")
    return OK
