"""Eight processes allocating revisions on Postgres: the store, raw asyncpg and `pgbench -c 8`."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from relay.store import testing_hooks as steps
from relay.store.testing_hooks import POSTGRES

PROCESSES = 8
NOW_SQL = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


def libpq_dsn(store_url: str) -> str:
    """The store URL as libpq and asyncpg spell it."""
    return make_url(store_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _allocate_for(kind: str, store_url: str, seconds: float, barrier: Any) -> float:
    if kind == "store":
        from relay.store import open_store

        async with open_store(store_url) as store:
            barrier.wait(timeout=120)

            def allocate() -> Any:
                return store.allocate_revisions(1, int(time.time() * 1000))

            return await _loop(allocate, seconds)
    from benchmarks.raw import PostgresRaw

    raw = await PostgresRaw.connect(libpq_dsn(store_url))
    try:
        barrier.wait(timeout=120)
        return await _loop(lambda: raw.allocate(1, int(time.time() * 1000)), seconds)
    finally:
        await raw.close()


async def _loop(op: Any, seconds: float) -> float:
    done, began = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - began) < seconds:
        await op()
        done += 1
    return done / elapsed


def _worker(kind: str, store_url: str, seconds: float, barrier: Any, results: Any) -> None:
    results.put(asyncio.run(_allocate_for(kind, store_url, seconds, barrier)))


def in_processes(kind: str, store_url: str, seconds: float) -> float:
    """Total ops/s of `PROCESSES` spawned processes on a connection each, started together."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    workers = [
        context.Process(target=_worker, args=(kind, store_url, seconds, barrier, results))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    rates = [results.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join()
    return float(sum(rates))


def pgbench_script() -> str:
    """The store's allocate statement for one revision, its parameters as server expressions.

    pgbench has no clock of its own, so `now` (and `first`, which derives from it) are computed
    by the server; the literals SQLAlchemy bound (`id = 1`, `+ 1`, the 2^53-1 guard) are spelled
    in. Replaced from the highest position down, so `$1` never eats the start of `$10`.
    """
    step = steps.allocate_revisions(POSTGRES, 1, 1)
    assert step is not None
    q = step[0]
    assert q.names is not None
    values = {name: repr(value) for name, value in q.defaults.items()}
    # `first` is max(1, now) + count - 1, as the store computes it (`revisions.allocate_step`).
    values |= {"now": NOW_SQL, "count": "1", "first": f"greatest(1, {NOW_SQL})"}
    script = q.sql
    for position in range(len(q.names), 0, -1):
        script = script.replace(f"${position}", f"({values[q.names[position - 1]]})")
    return " ".join(script.split()) + ";\n"


def pgbench_rate(store_url: str, seconds: float) -> float | None:
    """`pgbench -c 8 -j 2 -M prepared` running the allocate statement, as asyncpg prepares it;
    None when pgbench is not installed."""
    binary = shutil.which("pgbench")
    if binary is None:
        return None
    with tempfile.TemporaryDirectory(prefix="talaria-relay-bench-") as scratch:
        path = Path(scratch) / "allocate.sql"
        path.write_text(pgbench_script())
        command = [binary, "-n", "-M", "prepared", "-c", str(PROCESSES), "-j", "2"]
        result = subprocess.run(  # noqa: S603 (our own arguments, no shell)
            [*command, "-T", str(max(1, round(seconds))), "-f", str(path), libpq_dsn(store_url)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        )
    match = re.search(r"tps = ([0-9.]+)", result.stdout)
    return float(match.group(1)) if match else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


PAIRS = (("store", "pgbench"), ("raw", "pgbench"), ("store", "raw"))


def compare_processes(store_url: str, seconds: float, rounds: int) -> dict[str, Any]:
    """The three totals in `rounds` rounds of `seconds` each, the order turning every round so
    that a burst of load elsewhere lands on each side alike; medians of rates and of ratios."""
    runs: dict[str, Callable[[], float | None]] = {
        "store": lambda: in_processes("store", store_url, seconds),
        "raw": lambda: in_processes("raw", store_url, seconds),
        "pgbench": lambda: pgbench_rate(store_url, seconds),
    }
    order = list(runs)
    measured: list[dict[str, float | None]] = []
    for number in range(rounds):
        turned = order[number % len(order) :] + order[: number % len(order)]
        measured.append({name: runs[name]() for name in turned})
    figures: dict[str, Any] = {"processes": PROCESSES, "seconds": seconds, "rounds": rounds}
    for name in order:
        rates = [r for one in measured if (r := one[name]) is not None]
        figures[f"{name}_ops_per_s"] = round(statistics.median(rates), 1) if rates else None
    for mine, theirs in PAIRS:
        ratios = [r for one in measured if (r := ratio(one[mine], one[theirs])) is not None]
        figures[f"{mine}_vs_{theirs}"] = round(statistics.median(ratios), 3) if ratios else None
    return figures
