"""Timing: the store and the raw driver interleaved in rounds, summarised as ops/s and latency."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# One operation; `i` is unique across every call of a measurement, for fresh ids.
Op = Callable[[int], Awaitable[object]]
# Runs before each batch (untimed), given the batch's number: resets what the batch consumes.
Prepare = Callable[[int], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Rounds:
    """How much to measure: `rounds` rounds of `ops` operations per side."""

    rounds: int
    ops: int


@dataclass
class Side:
    """The latencies (seconds) and per-round rates of one side of a comparison."""

    latencies: list[float]
    rates: list[float]

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "ops_per_s": round(statistics.median(self.rates), 1),
            "p50_us": round(percentile(ordered, 0.50) * 1e6, 1),
            "p99_us": round(percentile(ordered, 0.99) * 1e6, 1),
        }


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


async def batch(op: Op, ops: int, first: int) -> tuple[list[float], float]:
    """Latencies of `ops` calls and their rate (ops over the batch's wall time)."""
    latencies = []
    clock = time.perf_counter
    began = clock()
    for i in range(first, first + ops):
        start = clock()
        await op(i)
        latencies.append(clock() - start)
    return latencies, ops / (clock() - began)


async def compare(
    plan: Rounds, store: Op, raw: Op | None, prepare: Prepare | None = None
) -> dict[str, Any]:
    """Interleave the store and the raw driver in rounds, alternating which goes first.

    Both sides run in this process on the same data, so machine noise hits both alike; the ratio
    is the median over rounds of store ops/s ÷ raw ops/s. A first round, untimed, warms both up.
    """
    sides = {"store": Side([], []), "raw": Side([], [])}
    ops = {"store": store, "raw": raw}
    ratios: list[float] = []
    counter = 0
    # Round -1 warms up both sides untimed: first statements, a new WAL file's first growth.
    for number in range(-1, plan.rounds):
        order = ("store", "raw") if number % 2 == 0 else ("raw", "store")
        rates: dict[str, float] = {}
        for name in order:
            op = ops[name]
            if op is None:
                continue
            if prepare is not None:
                await prepare(counter // plan.ops)
            latencies, rate = await batch(op, plan.ops, counter)
            counter += plan.ops
            if number >= 0:
                sides[name].latencies += latencies
                sides[name].rates.append(rate)
            rates[name] = rate
        if raw is not None and number >= 0:
            ratios.append(rates["store"] / rates["raw"])
    return {
        "store": sides["store"].summary(),
        "raw": sides["raw"].summary() if raw is not None else None,
        "ratio": round(statistics.median(ratios), 3) if ratios else None,
    }
