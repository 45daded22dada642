"""The bench: the store beside the raw drivers doing the same statements (docs/performance.md).

Run from a checkout (`make bench`, `python -m benchmarks`, or `talaria-relay bench` there); it is
not in the wheel. `run(plan)` measures every workload on every store and returns one JSON-ready
document. It reaches the store through the public API and `relay.store.testing_hooks` alone.
"""

from __future__ import annotations

from benchmarks.runner import Plan, run

__all__ = ["Plan", "run"]
