"""`talaria-relay`: migrate, inspect, rekey and copy relay state; run a dev relay and the demo.

Exit codes scripts can rely on (docs/operating.md#exit-codes): 0 success; 1 the check or job
failed; 2 bad usage or input; 3 the store or relay could not be reached. Passwords in store URLs
and key passphrases are never printed."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

from relay.cli.grants import cmd_grants
from relay.cli.migrating import cmd_migrate
from relay.cli.output import FAILED, OK, UNREACHABLE, USAGE, fail, say
from relay.cli.state import cmd_check, cmd_rekey, cmd_status
from relay.cli.transfer import cmd_import
from relay.cli.unpair import cmd_unpair
from relay.errors import (
    InvalidInputError,
    MissingExtraError,
    RelayError,
    RelayHttpError,
    RelayPairingError,
    RelayUnreachableError,
    StoreUnavailableError,
    TransferConflictError,
)
from relay.store.keys.keyring import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV
from relay.store.migrations import LOCK_TIMEOUT_MS
from relay.version import __version__


async def cmd_dev_relay(args: argparse.Namespace) -> int:
    from relay.testing import DevRelay, serve

    relay = DevRelay(keep_requests=args.keep_requests)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with serve(relay, args.host, args.port) as url:
        # One grant per relay user: each profile needs an invitation of its own relay user.
        owner, work = relay.mint_invitation("usr_owner"), relay.mint_invitation("usr_work")
        say(f"Talaria dev relay listening on {url}")
        say(f"relay URL:   {url}")
        say(f"invitation:  {owner}  (relay user usr_owner: registers the server)")
        say(f"invitation:  {work}  (relay user usr_work: enrolls a second profile)")
        say(
            f"try:         talaria-relay demo --relay-url {url} --invitation={owner} "
            f"--invitation={work} --allow-insecure-loopback"
        )
        say(
            f'more invitations: POST {url}/admin/invitations with {{"userId": "usr_…"}}, '
            "a new relay user for each further profile (docs/pairing.md); "
            f"what it holds: GET {url}/admin/state"
        )
        await stop.wait()
    say("dev relay stopped")
    return OK


async def cmd_demo(args: argparse.Namespace) -> int:
    from relay.cli import demo

    if (args.invitation or args.mint_invitations) and not args.relay_url:
        raise InvalidInputError("--invitation and --mint-invitations go with --relay-url")
    if args.relay_url and not (args.invitation or args.mint_invitations):
        raise InvalidInputError("--relay-url needs an --invitation (or --mint-invitations)")
    if args.replicas < 0:
        raise InvalidInputError("--replicas must be 0 or more")
    taken = "relay_url allow_insecure_loopback mint_invitations replicas skip_if_registered"
    options = {name: getattr(args, name) for name in taken.split()}
    passed = await demo.run(args.store, invitations=args.invitation, say=say, **options)
    return OK if passed else FAILED


# Where `benchmarks/` is in a checkout (not in the wheel: an editable install, or `python -m relay`
# from its root): beside the `relay/` package this process imported.
_CHECKOUT = Path(__file__).resolve().parents[2]


async def cmd_bench(args: argparse.Namespace) -> int:
    if not all((_CHECKOUT / name).is_file() for name in ("Makefile", "benchmarks/cli.py")):
        raise InvalidInputError(
            "the bench is not installed with talaria-relay: it runs from a checkout of the "
            "repository, as `make bench` (or `make bench STORE=postgresql://…`)"
        )
    if str(_CHECKOUT) not in sys.path:
        sys.path.insert(0, str(_CHECKOUT))
    bench = importlib.import_module("benchmarks.cli")
    code: int = await bench.main(args.bench_args)
    return code


# What to do about a relay's refusal of an invitation, by its reason.
_REMEDIES = {
    "invalid_invitation": "the relay does not know this invitation: ask for a new one",
    "expired_invitation": "the invitation expired or was used already: ask for a new one",
    "publisher_already_registered": "another user registered this publisher id at the relay",
}


def refusal(error: RelayPairingError) -> str:
    """A pairing refusal with the status a web app returns, told apart from the relay's own
    answer and reason."""
    cause = error.__cause__
    if isinstance(cause, RelayUnreachableError):
        return str(cause)  # upstream's "Could not reach Talaria Relay", and why
    if not isinstance(cause, RelayHttpError):
        return f"pairing refused with {error.status}: {error}"
    # Upstream's message ends in the relay's status, " (HTTP 400)": said once, as the relay's.
    message = str(error).removesuffix(f" (HTTP {cause.status})")
    said = f"the relay answered HTTP {cause.status}"
    if cause.code:
        said += f" {cause.code}"
        if cause.code in _REMEDIES:
            said += f": {_REMEDIES[cause.code]}"
    return f"pairing refused with {error.status}: {message} ({said})"


# A URL's password (`scheme://user:PASSWORD@`, up to the last `@` of the word) and an invitation.
_SECRETS = (
    (re.compile(r"(://[^\s:/@]*:)\S*@"), r"\1***@"),
    (re.compile(r"(--invitation=)\S+"), r"\1***"),
)

_STORE_FORMS = "(sqlite:///path, postgresql://…, json:///dir, memory://)"
_DEFAULT_STORE = "(default: $TALARIA_RELAY_STORE_URL, else the embedded SQLite file)"


Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def switches(sub: argparse.ArgumentParser, **helps: str) -> None:
    """An on/off `--name` for each keyword (`dry_run` is `--dry-run`), with its help."""
    for name, text in helps.items():
        sub.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=text)


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error (`unrecognized arguments: …`, say a store URL or a
    token typed in the wrong place) never repeats a password or an invitation."""

    def error(self, message: str) -> NoReturn:
        for pattern, replacement in _SECRETS:
            message = pattern.sub(replacement, message)
        super().error(message)


def parser() -> argparse.ArgumentParser:
    root = _Parser(
        prog="talaria-relay",
        description="Talaria Relay publisher state: migrate, inspect, rekey, copy; "
        "dev relay; demo.",
        epilog="exit codes: 0 ok, 1 failed, 2 bad usage or input, 3 store or relay unreachable",
    )
    root.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, run: Command, text: str, store_text: str | None = None, **kwargs: Any
    ) -> argparse.ArgumentParser:
        """A subcommand; with `store_text`, a `--store` that it reads (or writes) as told."""
        sub = commands.add_parser(name, help=text, description=text, **kwargs)
        sub.set_defaults(run=run)
        if store_text is not None:
            store_help = f"{store_text} {_DEFAULT_STORE} {_STORE_FORMS}"
            sub.add_argument("--store", metavar="URL", help=store_help)
        return sub

    sub = add(
        "migrate",
        cmd_migrate,
        "upgrade the store's schema to head (safe on replicas); a database a newer release "
        "migrated is left alone: exit 0 while this code may still use it, else 1",
        "the SQL store to migrate (a missing SQLite file and its directories are created)",
        epilog="A contract migration is refused while the fleet (`status`) has live replicas of "
        "older code; see docs/rolling-deploys.md.",
    )
    switches(
        sub,
        check="change nothing; exit 1 if not at head (0 when ahead and compatible)",
        sql="print the DDL of the revisions the database lacks instead of running it (reads its "
        "revision)",
        from_empty="with --sql: the DDL of every revision, from an empty database; connects to "
        "nothing",
    )
    sub.add_argument(
        "--to",
        metavar="REVISION",
        help="migrate to REVISION instead of head, down as well as up (a rollback: see "
        "docs/rolling-deploys.md)",
    )
    sub.add_argument(
        "--lock-timeout",
        type=float,
        default=LOCK_TIMEOUT_MS / 1000,
        metavar="SECONDS",
        help="Postgres: give up, changing nothing, after waiting this long for a table lock "
        "(default %(default)s)",
    )
    switches(
        sub, force="apply a contract migration even while live replicas of older code would break"
    )

    sub = add(
        "grants",
        cmd_grants,
        "print the SQL granting a runtime role what the store needs (DML only, no DDL)",
        "the Postgres store whose database is named",
        epilog="Run it as the owner role that migrates; nothing is contacted. The database "
        "name comes from --store (or $TALARIA_RELAY_STORE_URL).",
    )
    sub.add_argument("role", metavar="ROLE", help="the runtime role, exactly as created")
    sub.add_argument(
        "--schema",
        help="the tables' schema (default: the store URL's `schema=`, else public)",
    )
    sub.add_argument(
        "--owner",
        metavar="ROLE",
        help="the role that migrates, for default privileges on its future tables "
        "(default: whoever runs the SQL)",
    )

    sub = add(
        "status",
        cmd_status,
        "show what the store holds (never the private key)",
        "the store to read, never written (one that is not there is refused)",
    )
    switches(sub, json="the stable JSON shape (docs/operating.md)")

    sub = add(
        "check",
        cmd_check,
        "readiness probe: the store answers, is at head and holds a registration (exit 0), "
        "else 1, or 3 when the store cannot be reached; never calls the relay",
        "the store to probe, never written",
    )
    switches(sub, json="one JSON document (docs/operating.md)")

    sub = add(
        "unpair",
        cmd_unpair,
        "forget the store's registration with Talaria Relay, so the server can pair again",
        "the store whose registration to forget (one that is not there is refused)",
        epilog="It asks before it forgets (--yes for scripts). Exit codes: 0 forgotten, or "
        "nothing to forget; 1 answered no; 2 no terminal to ask on without --yes, or no store "
        "there; 3 the store cannot be reached. Profile identities stay; the relay keeps its "
        "side of the registration.",
    )
    sub.add_argument("--yes", action="store_true", help="forget without asking")

    sub = add(
        "rekey",
        cmd_rekey,
        "encrypt, re-encrypt or decrypt every stored key, all at once",
        "the store whose keys to rewrite (one that is not there is refused)",
        epilog=f"Keys are read with ${PASSPHRASE_ENV} (or ${PASSPHRASE_FILE_ENV}); the new "
        "passphrase is never taken on the command line. On failure nothing changes.",
    )
    to = sub.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to-passphrase-env", metavar="VAR", help="encrypt under the passphrase in variable VAR"
    )
    to.add_argument(
        "--to-passphrase-file",
        metavar="FILE",
        help="encrypt under the passphrase in FILE (its trailing newline dropped)",
    )
    to.add_argument("--decrypt", action="store_true", help="store the keys unencrypted")

    sub = add("import", cmd_import, "copy all relay state from one store to another")
    sub.add_argument("--from", dest="source", required=True, metavar="URL", help="source store")
    sub.add_argument("--to", dest="target", required=True, metavar="URL", help="target store")
    switches(
        sub, dry_run="report, write nothing", force="replace a different registration or identity"
    )
    sub.add_argument(
        "--profile-home",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a legacy JSON source's profile home (repeatable)",
    )
    sub.add_argument("--profiles-root", metavar="DIR", help="profile homes are DIR/NAME")
    switches(
        sub,
        allow_missing_identities="import a legacy JSON source even when profile identities are "
        "not found",
    )

    sub = add("dev-relay", cmd_dev_relay, "run a dev Talaria Relay on loopback")
    sub.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    sub.add_argument("--port", type=int, default=8787, help="port (default 8787; 0 picks one)")
    sub.add_argument(
        "--keep-requests",
        type=int,
        default=1_000,
        metavar="N",
        help="keep the last N requests it received (DevRelay.requests) "
        "(default %(default)s): a dev relay left running stays one size",
    )

    sub = add(
        "demo",
        cmd_demo,
        "publish a demo web app's sessions and check what the relay got; it writes only an empty "
        "store, never $TALARIA_RELAY_STORE_URL's",
    )
    sub.add_argument(
        "--store",
        metavar="URL",
        help="the store the demo writes, empty or not there yet (default: "
        "$XDG_STATE_HOME/talaria-relay/demo.db, made afresh for each dev relay; never "
        f"$TALARIA_RELAY_STORE_URL) {_STORE_FORMS}",
    )
    sub.add_argument("--relay-url", metavar="URL", help="a running relay instead of a dev relay")
    sub.add_argument(
        "--invitation",
        action="append",
        default=[],
        metavar="TOKEN",
        help="with --relay-url: the first registers, each further one enrolls a profile",
    )
    switches(
        sub,
        mint_invitations="with --relay-url of a dev relay: take invitations from its admin "
        "endpoint",
        allow_insecure_loopback="accept http:// for a loopback relay",
    )
    sub.add_argument(
        "--replicas", type=int, default=0, metavar="N", help="also run N replica processes"
    )
    switches(
        sub,
        skip_if_registered="a store that already holds a registration is left alone, and the "
        "demo exits 0",
    )
    # Its options are the bench's own (`talaria-relay bench --help` in a checkout).
    text = "from a checkout: measure the store beside the raw drivers doing the same statements"
    add("bench", cmd_bench, text, add_help=False)
    return root


def _glued(argv: Sequence[str]) -> list[str]:
    """`--invitation X` as `--invitation=X`: a token may start with `-`, like an option."""
    words, glued = list(argv), []
    while words:
        word = words.pop(0)
        glued.append(f"{word}={words.pop(0)}" if word == "--invitation" and words else word)
    return glued


# The exit code of a failure, by the first kind it is of (a conflict is also invalid input).
_EXITS: tuple[tuple[type[RelayError] | tuple[type[RelayError], ...], int], ...] = (
    ((StoreUnavailableError, RelayUnreachableError), UNREACHABLE),
    (TransferConflictError, FAILED),
    ((InvalidInputError, MissingExtraError), USAGE),
    (RelayError, FAILED),
)


def main(argv: Sequence[str] | None = None) -> int:
    root = parser()
    args, rest = root.parse_known_args(_glued(sys.argv[1:] if argv is None else argv))
    if args.command == "bench":
        args.bench_args = rest  # the bench's own options, read by the bench
    elif rest:
        root.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        code: int = asyncio.run(args.run(args))
    except KeyboardInterrupt:
        return FAILED
    except BrokenPipeError:
        # The reader went away (`… | head`): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILED
    except RelayPairingError as error:
        fail(refusal(error))
        return UNREACHABLE if isinstance(error.__cause__, RelayUnreachableError) else FAILED
    except OSError as error:
        # A file store's path that cannot be written (read-only, under a file): one line.
        fail(f"{error.strerror or error}: {error.filename}" if error.filename else str(error))
        return UNREACHABLE
    except RelayError as error:
        fail(str(error))
        return next(status for kinds, status in _EXITS if isinstance(error, kinds))
    return code
