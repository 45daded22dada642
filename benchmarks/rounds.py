"""Timing: sides interleaved in rounds, summarised as ops/s and latency, compared by ratio.

A side is one thing measured (the store, the raw driver, the store at one ledger size). Every
round runs one batch of each side, the order turning by one each round, so a burst of load
elsewhere on the machine lands on every side alike; a ratio of two sides is the median over
rounds of their rates in the same round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

# One operation, given its batch's number (unique across a measurement) and its place in it.
Op = Callable[[int, int], Awaitable[object]]
# Runs before each batch (untimed), given the batch's number: resets what the batch consumes.
Prepare = Callable[[int], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Rounds:
    """How much to measure: `rounds` rounds of `ops` operations per side."""

    rounds: int
    ops: int


@dataclass(frozen=True, slots=True)
class Side:
    """One thing measured: `ops` calls of `op` a batch, each batch after its `prepare`."""

    op: Op
    ops: int
    prepare: Prepare | None = None


@dataclass
class Sample:
    """The latencies (seconds) and per-round rates of one side."""

    latencies: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "ops_per_s": round(statistics.median(self.rates), 1),
            "p50_us": round(percentile(ordered, 0.50) * 1e6, 1),
            "p99_us": round(percentile(ordered, 0.99) * 1e6, 1),
        }


@dataclass
class Measured:
    """Every side's sample, and each round's rates by side."""

    samples: dict[str, Sample]
    rounds: list[dict[str, float]]

    def ratio(self, a: str, b: str) -> float | None:
        """The median over rounds of a's rate ÷ b's; None when b was not measured."""
        ratios = [one[a] / one[b] for one in self.rounds if one.get(b)]
        return round(statistics.median(ratios), 3) if ratios else None


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


async def batch(side: Side, number: int) -> tuple[list[float], float]:
    """Latencies of one batch's calls and their rate (ops over the batch's wall time)."""
    if side.prepare is not None:
        await side.prepare(number)
    latencies = []
    clock = time.perf_counter
    began = clock()
    for i in range(side.ops):
        start = clock()
        await side.op(number, i)
        latencies.append(clock() - start)
    return latencies, side.ops / (clock() - began)


async def interleave(rounds: int, sides: dict[str, Side]) -> Measured:
    """`rounds` rounds of one batch per side, after one untimed round that warms every side up
    (first statements, a new WAL file's first growth)."""
    names = list(sides)
    measured = Measured({name: Sample() for name in names}, [])
    number = 0
    for round_number in range(-1, rounds):
        turn = round_number % len(names)
        rates: dict[str, float] = {}
        for name in names[turn:] + names[:turn]:
            latencies, rates[name] = await batch(sides[name], number)
            number += 1
            if round_number >= 0:
                measured.samples[name].latencies += latencies
                measured.samples[name].rates.append(rates[name])
        if round_number >= 0:
            measured.rounds.append(rates)
    return measured


def figures(measured: Measured, store: str = "store", raw: str = "raw") -> dict[str, Any]:
    """One workload's store and raw summaries and their ratio."""
    samples = measured.samples
    return {
        "store": samples[store].summary(),
        "raw": samples[raw].summary() if raw in samples else None,
        "ratio": measured.ratio(store, raw),
    }


async def compare(
    plan: Rounds, store: Op, raw: Op | None, prepare: Prepare | None = None
) -> dict[str, Any]:
    """The store and the raw driver interleaved; both run in this process on the same data."""
    sides = {"store": Side(store, plan.ops, prepare)}
    if raw is not None:
        sides["raw"] = Side(raw, plan.ops, prepare)
    return figures(await interleave(plan.rounds, sides))
