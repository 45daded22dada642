"""`talaria-relay import`: copy all relay state from one store to another."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from relay.cli.output import OK, require_existing, say
from relay.errors import InvalidInputError
from relay.health import missing
from relay.store import open_store, resolve
from relay.store.transfer import transfer


def profile_homes(args: argparse.Namespace) -> Callable[[str], Path] | None:
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


def progress_bar(done: int, total: int) -> None:
    if sys.stderr.isatty() and total:
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        print(f"\r  ledger [{bar}] {done}/{total}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)


async def cmd_import(args: argparse.Namespace) -> int:
    source_target, target_target = resolve(args.source), resolve(args.target)
    if source_target.display == target_target.display:
        raise InvalidInputError("--from and --to name the same store")
    homes = profile_homes(args)  # a malformed flag is reported before any store is looked at
    require_existing(source_target, args.source, "--from")
    with tempfile.TemporaryDirectory(prefix="talaria-relay-dry-run-") as scratch:
        destination = args.target
        if args.dry_run and missing(target_target):
            destination = f"json://{scratch}"  # a dry run creates nothing: compare with empty
        async with open_store(args.source, profile_home=homes) as source:
            # A legacy state dir keeps each profile's identity in its home: without it,
            # enrollments would not match after the import. Checked before the target is opened,
            # which would create it.
            if source_target.backend == "json" and not args.allow_missing_identities:
                config, found = await source.load_config(), await source.identities()
                lost = sorted(set(config.profiles) - set(found)) if config is not None else []
                if lost:
                    raise InvalidInputError(
                        f"warning: no identity found for profiles {', '.join(lost)} in "
                        f"{source.display_url}: give their homes with --profile-home NAME=PATH "
                        "or --profiles-root DIR, or pass --allow-missing-identities to import "
                        "without them (each is then re-enrolled)"
                    )
            async with open_store(destination) as target:
                report = await transfer(
                    source, target, force=args.force, dry_run=args.dry_run, progress=progress_bar
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
