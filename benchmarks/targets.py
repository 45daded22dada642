"""The issue's performance targets, checked against one bench document.

Each check reads figures the document already holds; a check whose figures are missing (no
Postgres, no pgbench, a JSON store that counts no transactions) is left out rather than passed.
"""

from __future__ import annotations

from typing import Any

from relay.publishing.announcements import STARTED_BATCH

# Ratios the issue sets: store ÷ raw driver, largest ledger ÷ smallest, store ÷ pgbench.
LEDGER_FLOOR = 0.8
POSTGRES_FLOOR = 0.7
SQLITE_WRITE_FLOOR = 0.5
SQLITE_READ_FLOOR = 0.25
PROCESSES_FLOOR = 0.5
# A first pass beyond the steady pass's: its sightings and first claim, then per batch of 64
# announcements the mark that claims the next (tests/store/test_pass_cost.py).
FIRST_PASS_FIXED = 2.0
FIRST_PASS_PER_BATCH = 1.0
READS = frozenset({"profile_identity"})
# A steady pass at distance: at most this many round trips' worth of time over the pass at 0 ms.
STORE_RTT_BUDGET = 4  # with the store 5 ms away
RELAY_RTT_BUDGET = 3  # with the relay 50 ms away, P = 10


def _check(
    target: str, store: str, measured: float | None, bound: float, *, at_most: bool = False
) -> dict[str, Any]:
    """`measured` against `bound`: at least it, unless `at_most`."""
    met = None if measured is None else measured <= bound if at_most else measured >= bound
    return {
        "target": target,
        "store": store,
        "measured": measured,
        "bound": f"{'<=' if at_most else '>='} {bound}",
        "met": met,
    }


def _label(result: dict[str, Any]) -> str:
    return str(result["name"]) + ("" if result["ledger"] is None else f" @{result['ledger']:,}")


def _raw_floor(backend: str, name: str) -> float | None:
    if backend == "postgres":
        return POSTGRES_FLOOR
    if backend == "sqlite":
        return SQLITE_READ_FLOOR if name in READS else SQLITE_WRITE_FLOOR
    return None


def _store_checks(store: dict[str, Any]) -> list[dict[str, Any]]:
    backend = store["backend"]
    checks = []
    for name, curve in store["ledger_curve"].items():
        if backend != "json":
            sizes = [f"@{int(size):,}" for size in curve["ops_per_s"]]
            target = f"{name} {sizes[-1]} ÷ {sizes[0]}"
            checks.append(_check(target, backend, curve["largest_vs_smallest"], LEDGER_FLOOR))
    for result in store["workloads"]:
        floor = _raw_floor(backend, result["name"])
        if floor is not None:
            checks.append(_check(f"{_label(result)} ÷ raw", backend, result["ratio"], floor))
    processes = store["processes"]
    if processes is not None and processes["store_vs_pgbench"] is not None:
        measured = processes["store_vs_pgbench"]
        checks.append(_check("8 processes ÷ pgbench -c 8", backend, measured, PROCESSES_FLOOR))
    shape = store["publisher_shape"]
    if shape["steady_same_cost"] is not None:
        same = 1.0 if shape["steady_same_cost"] else 0.0
        checks.append(_check("steady pass: same cost at every S (1 = yes)", backend, same, 1.0))
        per_batch = shape["first_transactions_per_batch"]
        target = f"first pass: transactions per batch of {STARTED_BATCH}"
        checks.append(_check(target, backend, per_batch, FIRST_PASS_PER_BATCH, at_most=True))
        fixed = shape["first_transactions_fixed"]
        target = "first pass: transactions over steady + batches"
        checks.append(_check(target, backend, fixed, FIRST_PASS_FIXED, at_most=True))
    return checks + _distance_checks(backend, store.get("distance") or {})


def _distance_checks(backend: str, distance: dict[str, Any]) -> list[dict[str, Any]]:
    """The pass at distance: its wall time over the pass at 0 ms, in round trips of the link."""
    checks = []
    for side, rtt, budget, key in (
        ("store", 5.0, STORE_RTT_BUDGET, "store_rtt_ms"),
        ("relay", 50.0, RELAY_RTT_BUDGET, "relay_rtt_ms"),
    ):
        rows = {float(row[key]): row for row in distance.get(side, [])}
        if 0.0 in rows and rtt in rows:
            extra = (float(rows[rtt]["wall_ms"]) - float(rows[0.0]["wall_ms"])) / rtt
            target = f"steady pass, {side} {rtt:g} ms away: round trips' worth of time added"
            checks.append(_check(target, backend, round(extra, 2), budget, at_most=True))
    return checks


def check(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target that the document's figures decide, met or not."""
    return [one for store in document["stores"] for one in _store_checks(store)]
