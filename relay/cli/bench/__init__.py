"""`talaria-relay bench`: the store beside the raw drivers doing the same statements.

`run(plan)` measures every workload on every store and returns one JSON-ready document; the
method is in docs/performance.md.
"""

from __future__ import annotations

from relay.cli.bench.runner import Plan, run

__all__ = ["Plan", "run"]
