"""`talaria-relay bench`: the bench is `benchmarks/` of a checkout, not part of the wheel; in a
checkout (an editable install, or `python -m relay` from its root) this command runs it."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from relay.errors import InvalidInputError

# Where `benchmarks/` is in a checkout: beside the `relay/` package this process imported.
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
