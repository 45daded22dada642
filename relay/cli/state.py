"""The `talaria-relay` commands on a store's state: `status`, `check` and `rekey`."""

from __future__ import annotations

import argparse
import json

from relay.cli.output import FAILED, OK, fail, require_existing, say
from relay.store import open_store, resolve, standing
from relay.store.keys.keyring import Passphrase, passphrase_from_env, passphrase_from_file
from relay.store.url import source


async def cmd_status(args: argparse.Namespace) -> int:
    from relay.cli.status import collect, render, unmigrated

    target = resolve(args.store)
    require_existing(target, args.store)
    # Read the schema state first: opening an unmigrated store would refuse without saying it.
    found = None if target.url is None else await standing(target)
    if found is not None and (found.below or not found.runnable):
        status = unmigrated(target, found)
    else:
        # Read-only: status never writes, so it also reads a database it may not write.
        async with open_store(args.store, read_only=True) as store:
            status = await collect(store, found)
    say(json.dumps(status, indent=2) if args.json else render(status))
    if "hint" in status:  # a store this code does not run on
        fail(status["hint"])
        return FAILED
    return OK


async def cmd_check(args: argparse.Namespace) -> int:
    from relay.health import probe

    found = await probe(args.store)
    if args.json:
        say(json.dumps(found.document(), indent=2))
    else:
        where = "" if found.problem is None else f" (the store URL from {source(args.store)})"
        say(found.line() + where)
    return found.code


async def cmd_rekey(args: argparse.Namespace) -> int:
    target = resolve(args.store)
    require_existing(target, args.store)
    # Never from argv: every user of the machine sees it in `ps`.
    passphrase: Passphrase | None = None
    if args.to_passphrase_file is not None:
        passphrase = passphrase_from_file(args.to_passphrase_file)
    elif not args.decrypt:
        passphrase = passphrase_from_env(args.to_passphrase_env)
    async with open_store(args.store) as store:
        count = await store.rekey(passphrase)
    how = "unencrypted" if passphrase is None else f"encrypted under {passphrase.source}"
    say(f"{target.display}: {count} key(s), all stored {how}")
    return OK
