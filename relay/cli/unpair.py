"""`talaria-relay unpair`: forget the store's registration with Talaria Relay, once asked (the
parser's epilog says how); without a terminal to ask on nor `--yes` it refuses, not guesses."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from relay.cli.output import FAILED, OK, require_existing, say
from relay.errors import CorruptStateError, InvalidInputError
from relay.store import open_store, resolve
from relay.unpairing import unpair


async def cmd_unpair(args: argparse.Namespace, ask: Callable[[str], str] = input) -> int:
    target = resolve(args.store)
    require_existing(target, args.store)
    async with open_store(args.store) as store:
        try:
            held = None
            if (config := await store.load_config()) is not None:
                profiles = ", ".join(sorted(config.profiles)) or "none"
                held = (
                    f"registered with {config.url} as {config.publisher_id} "
                    f"(key {config.key_id}; profiles: {profiles})"
                )
        except CorruptStateError as error:
            held = f"an unreadable registration ({error})"
        if held is None:
            say(f"{target.display} holds no registration: nothing to forget")
            return OK
        say(f"{target.display} is {held}")
        if not args.yes:
            if not sys.stdin.isatty():
                raise InvalidInputError(
                    "unpair asks before it forgets, and there is no terminal to ask on: "
                    "pass --yes to forget without asking"
                )
            try:
                answer = ask(
                    "Forget this registration and its key? The relay keeps its side; pairing "
                    "again needs a new invitation. [y/N] "
                )
            except EOFError:  # the terminal closed: no answer is no
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                say("nothing forgotten")
                return FAILED
        await unpair(store)
    say(
        f"{target.display}: registration forgotten; stop or restart every service on this "
        "store, then pair again"
    )
    return OK
