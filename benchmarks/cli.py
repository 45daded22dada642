"""`talaria-relay bench`: its command and its options (the bench itself is `benchmarks`,
loaded only when it runs)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence

from benchmarks import Plan, run
from benchmarks.replicas import measure
from benchmarks.report import render
from benchmarks.runner import PG_ENV, Scratch
from relay.cli.output import OK, progress, say
from relay.errors import InvalidInputError
from relay.store import resolve


async def main(argv: Sequence[str]) -> int:
    """Run the bench as `talaria-relay bench ARGV` asks (usage errors exit 2, as argparse does)."""
    return await cmd_bench(parser().parse_args(argv))


async def cmd_bench(args: argparse.Namespace) -> int:
    if args.replicas is not None:
        return await _bench_replicas(args)
    # Progress goes to stderr so `--json` keeps stdout one document.
    plan = Plan(
        stores=tuple(args.stores),
        quick=args.quick,
        say=progress if args.json else say,
        ledger_sizes=args.ledger_sizes,
        ledger_only=args.ledger_only,
    )
    document = await run(plan)
    if args.json:
        say(json.dumps(document, indent=2))
    else:
        for line in ["", *render(document)]:
            say(line)
    return OK


async def _bench_replicas(args: argparse.Namespace) -> int:
    urls = [*args.stores, *([os.environ[PG_ENV]] if PG_ENV in os.environ else [])]
    targets = [target for target in map(resolve, urls) if target.backend == "postgres"]
    if not targets:
        raise InvalidInputError(f"--replicas needs a Postgres server: --store URL or ${PG_ENV}")
    if not (args.replicas >= 1 and args.profiles >= 1 and args.sessions >= 1 < args.seconds):
        raise InvalidInputError("--replicas, --profiles and --sessions must be >= 1, --seconds > 1")
    async with Scratch(targets[0]).fresh("replicas") as url:
        progress(f"{args.replicas} replicas, {args.profiles} profiles, {args.sessions} sessions")
        figures = await measure(url, args.replicas, args.profiles, args.sessions, args.seconds)
    say(json.dumps(figures, indent=2 if args.json else None))
    return OK


def parser() -> argparse.ArgumentParser:
    sub = argparse.ArgumentParser(
        prog="talaria-relay bench",
        description="measure the store beside the raw drivers doing the same statements; "
        "the bench makes its own scratch stores and never writes to a named one",
    )
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
    _ledger_options(sub)
    scale = sub.add_argument_group(
        "at scale",
        "with --replicas: only N replica processes on one Postgres (--store or "
        "$TALARIA_RELAY_TEST_POSTGRES_URL), a turn starting or ending every 100 ms",
    )
    scale.add_argument("--replicas", type=int, metavar="N", help="replica processes")
    scale.add_argument("--profiles", type=int, default=10, metavar="P", help="(default 10)")
    scale.add_argument("--sessions", type=int, default=2000, metavar="S", help="(default 2000)")
    scale.add_argument("--seconds", type=float, default=60.0, help="(default 60)")
    return sub


def _ledger_options(sub: argparse.ArgumentParser) -> None:
    """`bench`'s ledger options."""
    sub.add_argument(
        "--ledger-sizes",
        type=_sizes,
        default=(),
        metavar="N,N,…",
        help="the started-ledger sizes to measure (default 10,10000,100000; --quick 10,250); "
        "the ledger curve is the largest's ops/s over the smallest's",
    )
    sub.add_argument(
        "--ledger-only",
        action="store_true",
        help="only the ledger workloads (on Postgres after ANALYZE and right after the bulk load)",
    )


def _sizes(text: str) -> tuple[int, ...]:
    """`--ledger-sizes 10,100000`: whole numbers from 1 to 10,000,000."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("ledger sizes are whole numbers: 10,100000") from None
    if not sizes or not all(1 <= size <= 10_000_000 for size in sizes):
        raise argparse.ArgumentTypeError("each ledger size must be between 1 and 10,000,000")
    return sizes
