"""`talaria-relay`: migrate, inspect and copy relay state; run a dev relay; run the demo.

Exit codes scripts can rely on: 0 success; 1 the check or job failed (not at head, a conflict,
invalid stored state, a refused request); 2 bad usage or input; 3 the store or relay could not be
reached. Passwords in store URLs are never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

from relay.errors import (
    InvalidInputError,
    RelayError,
    RelayPairingError,
    RelayUnreachableError,
    StoreUnavailableError,
)
from relay.store import StoreTarget, migrate, open_store, resolve
from relay.store.transfer import TransferConflictError, transfer

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def say(line: str = "") -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    print(f"talaria-relay: {message}", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ── migrate ───────────────────────────────────────────────────────────────────


async def cmd_migrate(args: argparse.Namespace) -> int:
    target = resolve(args.store)
    if target.backend == "json":
        raise InvalidInputError("a JSON store has no schema to migrate")
    address = target.sqlalchemy_url.render_as_string(hide_password=False)
    head = migrate.head_revision()
    if args.sql:
        migrate.offline_sql(address)
        return OK
    if args.check:
        current = await migrate.current(address)
        if current == head:
            say(f"{target.display} is at head {head}")
            return OK
        say(f"{target.display} is at {current or 'no revision'}, not at head {head}")
        return FAILED
    await migrate.upgrade(address)
    say(f"{target.display} is at head {head}")
    return OK


# ── status ────────────────────────────────────────────────────────────────────


async def cmd_status(args: argparse.Namespace) -> int:
    from relay.status import collect, render

    target = resolve(args.store)
    async with open_store(args.store) as store:
        status = await collect(store, target)
    say(json.dumps(status, indent=2) if args.json else render(status))
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


# ── dev-relay and demo ────────────────────────────────────────────────────────


async def cmd_dev_relay(args: argparse.Namespace) -> int:
    from relay.testing import DevRelay, serve

    relay = DevRelay()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with serve(relay, args.host, args.port) as url:
        invitation = relay.mint_invitation()
        say(f"Talaria dev relay listening on {url}")
        say(f"relay URL:   {url}")
        say(f"invitation:  {invitation}")
        say(
            f"try:         talaria-relay demo --relay-url {url} --invitation={invitation} "
            "--allow-insecure-loopback"
        )
        say(f"more invitations: POST {url}/admin/invitations; what it holds: GET {url}/admin/state")
        await stop.wait()
    say("dev relay stopped")
    return OK


async def cmd_demo(args: argparse.Namespace) -> int:
    from relay import demo

    if (args.invitation or args.mint_invitations) and not args.relay_url:
        raise InvalidInputError("--invitation and --mint-invitations go with --relay-url")
    if args.relay_url and not (args.invitation or args.mint_invitations):
        raise InvalidInputError("--relay-url needs an --invitation (or --mint-invitations)")
    if args.replicas < 0:
        raise InvalidInputError("--replicas must be 0 or more")
    passed = await demo.run(
        args.store,
        relay_url=args.relay_url,
        invitations=args.invitation,
        allow_insecure_loopback=args.allow_insecure_loopback,
        mint_invitations=args.mint_invitations,
        replicas=args.replicas,
        say=say,
    )
    return OK if passed else FAILED


# ── bench ─────────────────────────────────────────────────────────────────────


async def cmd_bench(args: argparse.Namespace) -> int:
    from relay.bench import Plan, run
    from relay.bench.report import render

    # Progress goes to stderr so `--json` keeps stdout one document.
    plan = Plan(stores=tuple(args.stores), quick=args.quick, say=progress if args.json else say)
    document = await run(plan)
    if args.json:
        say(json.dumps(document, indent=2))
    else:
        for line in ["", *render(document)]:
            say(line)
    return OK


# ── the parser ────────────────────────────────────────────────────────────────

# A URL's password (`scheme://user:PASSWORD@`, up to the last `@` of the word) and an invitation.
_SECRETS = (
    (re.compile(r"(://[^\s:/@]*:)\S*@"), r"\1***@"),
    (re.compile(r"(--invitation=)\S+"), r"\1***"),
)


def _redacted(text: str) -> str:
    """`text` with the passwords of URLs and the values of `--invitation` replaced by `***`."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error never repeats a password or an invitation.

    argparse quotes what it could not place (`unrecognized arguments: …`), and a store URL or a
    token typed in the wrong place is exactly that.
    """

    def error(self, message: str) -> NoReturn:
        super().error(_redacted(message))


def parser() -> argparse.ArgumentParser:
    store = _Parser(add_help=False)
    store.add_argument(
        "--store",
        metavar="URL",
        help="the relay store: sqlite:///path, postgresql://…, json:///dir "
        "(default: $TALARIA_RELAY_STORE_URL, else the embedded SQLite file)",
    )
    root = _Parser(
        prog="talaria-relay",
        description="Talaria Relay publisher state: migrate, inspect, copy; dev relay; demo.",
        epilog="exit codes: 0 ok, 1 failed, 2 bad usage or input, 3 store or relay unreachable",
    )
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, run: Command, text: str, **kwargs: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[store], help=text, description=text, **kwargs)
        sub.set_defaults(run=run)
        return sub

    sub = add("migrate", cmd_migrate, "upgrade the store's schema to head (safe on replicas)")
    sub.add_argument("--check", action="store_true", help="change nothing; exit 1 if not at head")
    sub.add_argument("--sql", action="store_true", help="print the DDL instead of running it")

    sub = add("status", cmd_status, "show what the store holds (never the private key)")
    sub.add_argument("--json", action="store_true", help="the stable JSON shape (see README)")

    sub = add("import", cmd_import, "copy all relay state from one store to another")
    sub.add_argument("--from", dest="source", required=True, metavar="URL", help="source store")
    sub.add_argument("--to", dest="target", required=True, metavar="URL", help="target store")
    sub.add_argument("--dry-run", action="store_true", help="report, write nothing")
    sub.add_argument(
        "--force", action="store_true", help="replace a different registration or identity"
    )
    sub.add_argument(
        "--profile-home",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a legacy JSON source's profile home (repeatable)",
    )
    sub.add_argument("--profiles-root", metavar="DIR", help="profile homes are DIR/NAME")

    sub = add("dev-relay", cmd_dev_relay, "run a dev Talaria Relay on loopback")
    sub.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    sub.add_argument("--port", type=int, default=8787, help="port (default 8787; 0 picks one)")

    sub = add("demo", cmd_demo, "publish a demo web app's sessions and check what the relay got")
    sub.add_argument("--relay-url", metavar="URL", help="a running relay instead of a dev relay")
    sub.add_argument(
        "--invitation",
        action="append",
        default=[],
        metavar="TOKEN",
        help="with --relay-url: the first registers, each further one enrolls a profile",
    )
    sub.add_argument(
        "--mint-invitations",
        action="store_true",
        help="with --relay-url of a dev relay: take invitations from its admin endpoint",
    )
    sub.add_argument(
        "--allow-insecure-loopback", action="store_true", help="accept http:// for a loopback relay"
    )
    sub.add_argument(
        "--replicas", type=int, default=0, metavar="N", help="also run N replica processes"
    )
    sub = commands.add_parser(
        "bench",
        help="measure the store beside the raw drivers doing the same statements",
        description="measure the store beside the raw drivers doing the same statements; "
        "the bench makes its own scratch stores and never writes to a named one",
    )
    sub.set_defaults(run=cmd_bench)
    sub.add_argument(
        "--store",
        dest="stores",
        action="append",
        default=[],
        metavar="URL",
        help="a backend and place to measure (repeatable; default: SQLite and JSON in a temporary "
        "directory, plus Postgres at $TALARIA_RELAY_TEST_POSTGRES_URL): a Postgres URL's server "
        "gets scratch databases, a SQLite or JSON URL's directory scratch stores",
    )
    sub.add_argument("--quick", action="store_true", help="few ops, small ledgers, same shape")
    sub.add_argument("--json", action="store_true", help="one JSON document with every figure")
    return root


def _glued(argv: Sequence[str]) -> list[str]:
    """`--invitation X` as `--invitation=X`: a token may start with `-`, like an option."""
    words, glued = list(argv), []
    while words:
        word = words.pop(0)
        glued.append(f"{word}={words.pop(0)}" if word == "--invitation" and words else word)
    return glued


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(_glued(sys.argv[1:] if argv is None else argv))
    try:
        code: int = asyncio.run(args.run(args))
    except KeyboardInterrupt:
        return FAILED
    except BrokenPipeError:
        # The reader went away (`… | head`): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILED
    except RelayPairingError as error:
        fail(str(error))
        unreachable = isinstance(error.__cause__, RelayUnreachableError)
        return UNREACHABLE if unreachable else FAILED
    except ModuleNotFoundError as error:
        if error.name != "uvicorn":
            raise
        fail("the dev relay needs uvicorn: pip install 'talaria-relay[devrelay]'")
        return USAGE
    except (StoreUnavailableError, RelayUnreachableError) as error:
        fail(str(error))
        return UNREACHABLE
    except TransferConflictError as error:
        fail(str(error))
        return FAILED
    except InvalidInputError as error:
        fail(str(error))
        return USAGE
    except RelayError as error:
        fail(str(error))
        return FAILED
    return code
